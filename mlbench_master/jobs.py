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
import time
from typing import Any

log = logging.getLogger(__name__)

READ_SECONDS = 0.5  # how long one read of the output waits
STATE_CHECK_SECONDS = 1.0  # how often the run's state is re-read (cancellation)
FLUSH_SECONDS = 1.0  # log rows are written at least this often ...
FLUSH_LINES = 500  # ... or when this many lines are waiting
STDERR_TAIL = 15  # stderr lines quoted in a FAILED reason
REASON_MAX_CHARS = 4000

LOST = "master restarted; run lost"


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
    driver = get_driver()

    if run.state == Run.STARTED:
        execution = _reattach(run, driver)
        if execution is None:
            return run.state
        log.info("run %s: re-attached after a master restart", run.pk)
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
    return _watch(run, driver, execution)


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


def collector_loop(interval: float = 5.0, stop: Any = None) -> None:
    """Call collect_pod_metrics every `interval` seconds until `stop()` is true."""
    from django.db import close_old_connections

    while stop is None or not stop():
        began = time.monotonic()
        try:
            collect_pod_metrics()
        except Exception:  # a failed reading must not end the loop
            log.exception("collecting pod metrics failed")
            close_old_connections()
        time.sleep(max(0.5, interval - (time.monotonic() - began)))


# --------------------------------------------------------------------------- restart


def reconcile() -> list[str]:
    """At master start-up: put every active run back on a path to a truthful end.

    STARTED runs whose job no live RQ worker is executing are re-enqueued: `run_job`
    re-attaches when the ranks still run and fails the run with "master restarted; run
    lost" when they are gone. INITIALIZED runs whose job vanished (Redis restarted) are
    enqueued again. Returns a line per run handled (for the launcher's log).
    """
    _django()
    from mlbench_master import runs
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.base import get_driver

    busy = _jobs_in_progress()
    queued = _queued_jobs()
    notes = []
    driver = None
    for run in Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("created_at"):
        if run.job_id and run.job_id in busy:
            continue
        if run.state == Run.INITIALIZED:
            if run.job_id and run.job_id in queued:
                continue
            try:
                runs.enqueue_run(run)
                notes.append(f"run {run.pk}: enqueued again (its job was lost)")
            except runs.QueueUnavailable as exc:
                notes.append(f"run {run.pk}: FAILED ({exc})")
            continue
        driver = driver or get_driver()
        if driver.is_running(run):
            runs.enqueue_run(run)
            notes.append(f"run {run.pk}: ranks still running, watched again")
        else:
            runs.mark_failed(run, LOST)
            notes.append(f"run {run.pk}: FAILED ({LOST})")
    return notes


def _redis() -> Any:
    from mlbench_master import runs

    return runs._redis()


def _jobs_in_progress(fresh_seconds: float = 90.0) -> set[str]:
    """Ids of the jobs live RQ workers are executing now.

    A worker that died without saying so stays registered until its key expires; one whose
    last heartbeat (every 30 s while it works) is older than `fresh_seconds` is not live.
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
            if job_id and beat is not None and (now - beat).total_seconds() < fresh_seconds:
                busy.add(job_id)
        return busy
    except Exception:  # Redis down: nothing is in progress anywhere
        return set()


def _queued_jobs() -> set[str]:
    try:
        from rq import Queue

        return set(Queue("runs", connection=_redis()).job_ids)
    except Exception:
        return set()
