"""RQ jobs: running a run end to end, recording pod metrics, reconciling after a restart.

`run_job(run_id)` is the one job per run (enqueued by `runs.enqueue_run` on queue "runs"):

    driver.prepare → mark_started → driver.launch(mpirun_argv, rank_environment)
    → output stored as LogChunk rows while it comes → exit code → FINISHED / FAILED

Truth over convenience: a run is FINISHED only when mpirun exited 0. Anything else is
FAILED with a reason read from mpirun's own report ("rank 1 exited with code 137 (killed:
out of memory?)") plus the last lines the ranks wrote to stderr. The run's time limit is
enforced here (the RQ timeout, time limit + margin, is only a backstop), and a run the API
moved to CANCELLED is noticed within a second and its ranks killed. States are changed only
through `mlbench_master.runs`.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import re
import socket
import time
from typing import Any

log = logging.getLogger(__name__)

READ_SECONDS = 0.5  # how long one read of the output waits
STATE_CHECK_SECONDS = 1.0  # how often the run's state is re-read (cancellation)
FLUSH_SECONDS = 1.0  # log rows are written at least this often ...
FLUSH_LINES = 500  # ... or when this many lines are waiting
STDERR_TAIL = 15  # stderr lines quoted in a FAILED reason
REASON_MAX_CHARS = 4000
RECONCILE_SECONDS = 30.0  # how often the collector looks for runs whose job died

LOST = "master restarted; run lost"
UNRECORDED = (
    "run lost: mpirun ended while no job watched it and recorded no exit code (it was killed)"
)
JOB_DIED = "the run's job died (its RQ worker process is gone)"


def _django() -> None:
    """RQ workers started by plain `rq worker` have not set Django up yet."""
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


# --------------------------------------------------------------------------- logs


class LogWriter:
    """Stores output lines as LogChunk rows (through `api.logs.append_logs`), batched.

    Consecutive lines of the same rank and stream become one chunk, and chunks are written
    together at most every FLUSH_SECONDS (or FLUSH_LINES lines), so a chatty run costs a
    few INSERTs a second, not one per line. `append_logs` bounds the stored log per run.
    The last stderr lines are also kept here for the FAILED reason.
    """

    def __init__(self, run: Any, on_stored: Any = None) -> None:
        self.run = run
        self.on_stored = on_stored  # called once lines are in the database (checkpoint)
        self.pending: list[Any] = []
        self.last_flush = time.monotonic()
        self.gone = False  # the run was deleted: nothing more to store
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_lines: collections.deque[str] = collections.deque(maxlen=200)

    def add(self, lines: list[Any]) -> None:
        for line in lines:
            if line.rank is None:
                self.mpirun_lines.append(line.text)
            if line.stream == "stderr" and line.text.strip() and not _is_banner(line.text):
                if line.rank is None:
                    self.mpirun_tail.append(line.text)
                else:
                    self.stderr_tail.append(f"[rank {line.rank}] {line.text}")
        self.pending.extend(lines)
        if len(self.pending) >= FLUSH_LINES or (
            self.pending and time.monotonic() - self.last_flush >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        from django.db import IntegrityError

        from mlbench_master.api.logs import append_logs
        from mlbench_master.api.models import Run

        self.last_flush = time.monotonic()
        lines, self.pending = self.pending, []
        if not lines or self.gone:
            return
        entries: list[tuple[int | None, str, str]] = []
        group: list[str] = []
        key: tuple[int | None, str] | None = None
        for line in lines:
            if (line.rank, line.stream) != key:
                if group and key is not None:
                    entries.append((key[0], key[1], "\n".join(group) + "\n"))
                group = []
                key = (line.rank, line.stream)
            group.append(line.text)
        if group and key is not None:
            entries.append((key[0], key[1], "\n".join(group) + "\n"))
        try:
            append_logs(self.run.pk, entries)
        except (Run.DoesNotExist, IntegrityError):
            self.gone = True  # deleted while it ran (DELETE cancels, then removes the row)
            return
        if self.on_stored is not None:
            self.on_stored()


def _is_banner(text: str) -> bool:
    return set(text.strip()) <= set("-=*")


# --------------------------------------------------------------------------- reasons

_SIGNAL_EXIT = re.compile(
    r"process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on\s+signal (?P<sig>\d+)"
)
_CODE_EXIT = re.compile(r"Process name:\s*\[[^\]]*?,(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>\d+)")
_SIGNAL_HINTS = {
    9: "killed: out of memory?",
    15: "terminated",
    6: "aborted",
    11: "segmentation fault",
    7: "bus error",
    2: "interrupted",
}


def failure_reason(exit_code: int, mpirun_lines: Any, stderr_tail: Any) -> str:
    """A FAILED reason a person can act on, from mpirun's report and the ranks' stderr."""
    report = " ".join(" ".join(mpirun_lines).split())
    match = _SIGNAL_EXIT.search(report)
    if match:
        sig = int(match["sig"])
        hint = _SIGNAL_HINTS.get(sig, f"signal {sig}")
        head = f"rank {match['rank']} exited with code {128 + sig} ({hint})"
    else:
        match = _CODE_EXIT.search(report)
        if match:
            head = f"rank {match['rank']} exited with code {match['code']}"
        elif exit_code > 128:
            sig = exit_code - 128
            head = (
                f"mpirun exited with code {exit_code} ({_SIGNAL_HINTS.get(sig, f'signal {sig}')})"
            )
        else:
            head = f"mpirun exited with code {exit_code}"
    tail = list(stderr_tail)
    if tail:
        head += "; last lines of stderr:\n" + "\n".join(tail)
    if len(head) > REASON_MAX_CHARS:
        head = head[: REASON_MAX_CHARS - 1] + "…"
    return head


# --------------------------------------------------------------------------- the run job


def run_job(run_id: int) -> str:
    """Run (or, after a master restart, keep watching) run `run_id`; returns its end state."""
    _django()
    from django.conf import settings

    from mlbench_master import runs
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.base import ClusterError, get_driver
    from mlbench_master.cluster.mpirun import mpirun_argv, rank_environment

    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return "deleted"
    if run.state in Run.FINAL_STATES:
        return run.state
    driver = None
    try:
        driver = get_driver()
        if run.state == Run.STARTED:
            execution = _reattach(run, driver)
            if execution is None:
                return run.state
            log.info("run %s: re-attached", run.pk)
        else:
            try:
                hosts = driver.prepare(run)
            except ClusterError as exc:
                runs.mark_failed(run, str(exc))
                return run.state
            if not runs.mark_started(run):
                return run.state  # cancelled (or deleted) while the workers were prepared
            argv = mpirun_argv(
                run,
                hosts,
                mpirun=getattr(driver, "mpirun", "mpirun"),
                python=getattr(driver, "python", "python"),
            )
            env = rank_environment(run, settings.MLBENCH_MASTER_URL, runs.worker_token(run))
            try:
                execution = driver.launch(run, argv, env)
            except (ClusterError, OSError) as exc:
                runs.mark_failed(run, f"could not start mpirun: {exc}")
                return run.state
            _save_job_metadata(run)
            # Cancelled between mark_started and the launch: driver.cancel() found nothing
            # to kill then, so this job kills what it just started.
            state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
            if state != Run.STARTED:
                execution.kill()
                _drain(execution, LogWriter(run, on_stored=getattr(execution, "checkpoint", None)))
                return state or "deleted"
    except Exception as exc:
        # Whatever went wrong before the run was watched (a Kubernetes API error, a command
        # shlex cannot split, a database error): never leave the run active with no job.
        _abandon(run, driver, f"the run's job failed before mpirun was watched: {_describe(exc)}")
        raise
    return _watch(run, driver, execution)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _abandon(run: Any, driver: Any, reason: str) -> None:
    """Best effort: stop whatever of `run` may run, then mark it FAILED with `reason`."""
    from mlbench_master import runs

    if driver is not None:
        try:
            driver.cancel(run)
        except Exception as exc:  # noqa: BLE001 - the FAILED state matters more
            log.warning("run %s: cancel after a failure failed too: %s", run.pk, exc)
            reason += f"; stopping its processes failed: {exc}"
    try:
        runs.mark_failed(run, reason)
    except Exception:  # noqa: BLE001 - the database itself may be what failed
        log.exception("run %s: could not be marked FAILED (%s)", run.pk, reason)


def _save_job_metadata(run: Any) -> None:
    from mlbench_master.api.models import Run

    Run.objects.filter(pk=run.pk).update(job_metadata=run.job_metadata)


def _reattach(run: Any, driver: Any) -> Any:
    """The Execution of a STARTED run whose job was lost, or None after failing the run."""
    from mlbench_master import runs

    execution = driver.attach(run) if hasattr(driver, "attach") else None
    if execution is not None:
        return execution
    if driver.is_running(run):
        driver.cancel(run)
        runs.mark_failed(run, f"{LOST} (its output stream cannot be re-attached; ranks stopped)")
    else:
        runs.mark_failed(run, LOST)
    return None


def _watch(run: Any, driver: Any, execution: Any) -> str:
    """Store output, enforce the time limit, notice cancellation, decide the end state."""
    from mlbench_master import runs
    from mlbench_master.api.models import Run

    writer = LogWriter(run, on_stored=getattr(execution, "checkpoint", None))
    started = run.started_at or dt.datetime.now(dt.UTC)
    deadline = started + dt.timedelta(seconds=int(run.time_limit))
    next_check = 0.0
    try:
        while True:
            writer.add(execution.read(READ_SECONDS))
            code = execution.poll()
            if code is not None:
                break
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + STATE_CHECK_SECONDS
                state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
                if state != Run.STARTED:
                    # CANCELLED by the API (its driver.cancel usually got there first) or gone.
                    execution.kill()
                    _drain(execution, writer)
                    return state or "deleted"
            if dt.datetime.now(dt.UTC) >= deadline:
                execution.kill()
                _drain(execution, writer)
                runs.mark_failed(
                    run, f"time limit of {int(run.time_limit)} s reached; all ranks were stopped"
                )
                return run.state
    except BaseException as exc:
        # RQ's job timeout, a stop command or a bug: never leave ranks behind.
        try:
            execution.kill()
            writer.flush()
        finally:
            if Run.objects.filter(pk=run.pk, state=Run.STARTED).exists():
                runs.mark_failed(run, f"the run's job stopped: {type(exc).__name__}: {exc}")
        raise
    writer.flush()
    execution.kill()  # a failed mpirun may leave ranks behind; after exit 0 this is a no-op
    if not Run.objects.filter(pk=run.pk).exists():
        return "deleted"
    run.refresh_from_db()
    if code == 0:
        runs.mark_finished(run, 0)
    elif getattr(execution, "exit_unknown", False):
        # Re-attached to an mpirun that ended while nobody watched and left no exit code.
        tail = list(writer.stderr_tail or writer.mpirun_tail)
        reason = UNRECORDED + ("; last lines of stderr:\n" + "\n".join(tail) if tail else "")
        runs.mark_failed(run, reason[:REASON_MAX_CHARS])
    else:
        runs.mark_failed(
            run,
            failure_reason(code, writer.mpirun_lines, writer.stderr_tail or writer.mpirun_tail),
            exit_code=code,
        )
    return run.state


def _drain(execution: Any, writer: LogWriter) -> None:
    """Store what the killed processes wrote last (bounded wait)."""
    for _ in range(10):
        writer.add(execution.read(0.2))
        if execution.poll() is not None:
            break
    writer.flush()


# --------------------------------------------------------------------------- pods


def collect_pod_metrics() -> int:
    """One reading of every worker in use (CPU cores, memory, network) + the Pod rows.

    Called every 5 s by the launcher's collector process. Returns the points stored.
    """
    _django()
    from mlbench_master.api.models import Metric
    from mlbench_master.api.pods import sync_pods
    from mlbench_master.cluster.base import get_driver

    driver = get_driver()
    sync_pods(driver.pods())
    samples = driver.pod_metrics()
    Metric.objects.bulk_create(
        [
            Metric(
                run=None,
                pod_name=s.pod_name,
                name=s.name,
                value=float(s.value),
                date=s.date,
                cumulative=s.cumulative,
                metadata=s.metadata,
            )
            for s in samples
        ]
    )
    return len(samples)


def collector_loop(
    interval: float = 5.0, stop: Any = None, reconcile_every: float = RECONCILE_SECONDS
) -> None:
    """Call collect_pod_metrics every `interval` seconds until `stop()` is true.

    Every `reconcile_every` seconds it also runs `reconcile(JOB_DIED)`: when the RQ work
    horse watching a run dies (OOM killer, segfault) nothing else would ever end the run.
    """
    from django.db import close_old_connections

    next_reconcile = time.monotonic() + reconcile_every
    while stop is None or not stop():
        began = time.monotonic()
        try:
            collect_pod_metrics()
        except Exception:  # a failed reading must not end the loop
            log.exception("collecting pod metrics failed")
            close_old_connections()
        if time.monotonic() >= next_reconcile:
            next_reconcile = time.monotonic() + reconcile_every
            try:
                for note in reconcile(JOB_DIED, min_age=reconcile_every):
                    log.warning("reconciled %s", note)
            except Exception:
                log.exception("reconciling active runs failed")
                close_old_connections()
        time.sleep(max(0.5, interval - (time.monotonic() - began)))


# --------------------------------------------------------------------------- restart


def reconcile(lost: str = LOST, min_age: float = 0.0) -> list[str]:
    """Put every active run whose job is gone back on a path to a truthful end.

    Called at master start-up (`lost` = "master restarted; run lost") and periodically by
    the collector (`lost` = JOB_DIED, `min_age` = its period, so a run just created or
    just started is left to its job). A run whose job is queued, or executed by a live RQ
    worker, is left alone. Otherwise:

    - INITIALIZED: its job is enqueued again.
    - STARTED, and the driver can re-attach to the launch (local: the output files and the
      exit code mpirun's wrapper records): re-enqueued; `run_job` reads the rest of the
      output and ends the run by mpirun's real exit code (FINISHED on 0).
    - STARTED, the driver cannot re-attach (Kubernetes): its ranks are stopped and the run
      is FAILED.
    - Redis refuses the job: the ranks are stopped and the run FAILED (never an exception).

    Returns a line per run handled (for the launcher's log).
    """
    _django()
    from django.utils import timezone

    from mlbench_master import runs
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.base import get_driver

    busy = _jobs_in_progress()
    notes = []
    driver = None
    settled = timezone.now() - dt.timedelta(seconds=min_age)
    for run in Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("created_at"):
        if run.job_id and (run.job_id in busy or _job_waiting(run.job_id)):
            continue
        if min_age and max(filter(None, [run.created_at, run.started_at])) > settled:
            continue
        if run.state == Run.INITIALIZED:
            try:
                runs.enqueue_run(run)
                notes.append(f"run {run.pk}: enqueued again (its job was lost)")
            except runs.QueueUnavailable as exc:
                notes.append(f"run {run.pk}: FAILED ({exc})")
            continue
        driver = driver or get_driver()
        if not _can_attach(driver, run):
            if getattr(driver, "attach", None) is None:
                why = f"the {driver.name} driver cannot re-attach to a launch"
            else:
                why = "no launch of it is recorded to re-attach to"
            _abandon(run, driver, f"{lost} ({why}; its ranks were stopped)")
            notes.append(f"run {run.pk}: FAILED, ranks stopped ({run.reason})")
            continue
        try:
            runs.enqueue_run(run)
        except runs.QueueUnavailable as exc:
            _abandon(run, driver, str(exc))  # enqueue_run failed it already; stop the ranks
            notes.append(f"run {run.pk}: FAILED, ranks stopped ({exc})")
            continue
        what = "ranks still running" if driver.is_running(run) else "ranks ended"
        notes.append(f"run {run.pk}: {what}; its output is read again to end it truthfully")
    return notes


def _can_attach(driver: Any, run: Any) -> bool:
    attach = getattr(driver, "attach", None)
    try:
        return attach is not None and attach(run) is not None
    except Exception:  # noqa: BLE001 - cannot re-attach is the answer
        return False


def _redis() -> Any:
    from mlbench_master import runs

    return runs._redis()


def _jobs_in_progress(fresh_seconds: float = 90.0) -> set[str]:
    """Ids of the jobs live RQ workers are executing now.

    A worker that died without saying so stays registered until its key expires; one whose
    last heartbeat (every 30 s while it works) is older than `fresh_seconds` is not live,
    nor is one on this machine whose process no longer exists (a fresh heartbeat says
    nothing when the worker was SIGKILLed a second ago).
    """
    try:
        from rq import Worker

        now = dt.datetime.now(dt.UTC)
        busy = set()
        for worker in Worker.all(connection=_redis()):
            job_id = worker.get_current_job_id()
            beat = worker.last_heartbeat
            if beat is not None and beat.tzinfo is None:
                beat = beat.replace(tzinfo=dt.UTC)
            if not job_id or beat is None or (now - beat).total_seconds() >= fresh_seconds:
                continue
            if worker.hostname == socket.gethostname() and not _pid_alive(worker.pid):
                continue
            busy.add(job_id)
        return busy
    except Exception:  # Redis down: nothing is in progress anywhere
        return set()


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - no such process (or not readable: assume gone)
        return False


def _job_waiting(job_id: str) -> bool:
    """Whether the job is queued (or popped by a worker that has not marked it started)."""
    try:
        from rq.job import Job, JobStatus

        status = Job.fetch(job_id, connection=_redis()).get_status()
        return status in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED)
    except Exception:  # no such job, or Redis down
        return False
