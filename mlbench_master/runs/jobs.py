"""The run job: one RQ job per run, from preparing workers to the run's truthful end.

`run_job(run_id)` is enqueued by `lifecycle.enqueue_run` on queue "runs":

    driver.prepare → mark_started → driver.launch(mpirun_argv, rank_environment)
    → output stored as LogChunk rows while it comes → exit code → FINISHED / FAILED

The command is built from `lifecycle.run_spec(run, checkpoints=driver.checkpoint_dir)`: the
run's resolved time budget, its checkpoint folder and, for a resumed run, its parent's.

Truth over convenience: a run is FINISHED only when mpirun exited 0. Anything else is
FAILED with a reason read from mpirun's own report (cluster/failures.py), with one
exception: Open MPI's transient launch failure before any rank started
(cluster/transient.py) is launched once more, said in the run's log. The run's time
limit is enforced here (the RQ timeout, time limit + margin, is only a backstop), and a
run the API moved to CANCELLED is noticed within a second and its ranks killed. States
are changed only through `mlbench_master.runs.lifecycle`; the driver is reached only through the
operations `cluster.base` declares. One job watches a run at a time: it holds the run's
watch lock (runs/watching.py) from its first step to its last.

A database that cannot be reached for a while (a restart, a network blip) does not end a
run: while it watches, the job keeps reading output (the log writer holds it) and takes
the run's state as unchanged; at the end it waits up to DB_PATIENCE seconds for the
database to store the output and the end state.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError

from mlbench_master.api.models import Run
from mlbench_master.cluster import drivers
from mlbench_master.cluster.base import (
    CannotAttach,
    ClusterDriver,
    ClusterError,
    Execution,
    OutputLine,
    RunSpec,
)
from mlbench_master.cluster.failures import OutputTail
from mlbench_master.cluster.mpirun import driver_argv, rank_environment
from mlbench_master.cluster.transient import RELAUNCH_NOTE, LaunchStart
from mlbench_master.runs import lifecycle, watching
from mlbench_master.runs.logwriter import LogWriter, drop_connection

log = logging.getLogger(__name__)

READ_SECONDS = 0.5  # how long one read of the output waits
STATE_CHECK_SECONDS = 1.0  # how often the run's state is re-read (cancellation)
DB_PATIENCE = 120.0  # how long the end of a run waits for an unreachable database

LOST = "master restarted; run lost"
LAUNCH_ATTEMPT = "launch_attempt"  # in the launch record of a launch after the first
# What a job returns when another job watches its run (it holds the run's watch lock).
WATCHED = "watched by another job (it holds the run's watch lock)"
# mpirun ended and no exit code was recorded (it was killed with its wrapper). A job that
# re-attached says why nobody saw it end, the fault a person must look for: its first job
# was gone with the master or its RQ worker. A job that watched it all along (a Kubernetes
# exec session cut, a Slurm job its controller forgot) says only what is known.
UNRECORDED = "run lost: mpirun ended and recorded no exit code (it was killed)"
UNRECORDED_UNWATCHED = (
    "run lost: mpirun ended while its job was gone (a master restart or a dead RQ worker) "
    "and recorded no exit code (it was killed)"
)


class Output:
    """Where a launch's lines go: the run's stored log, the tail a FAILED reason quotes, and
    what they say of the launch's start (a transient failure of Open MPI's launcher)."""

    def __init__(self, run_id: int, execution: Execution, reattached: bool = False) -> None:
        self.reattached = reattached  # a job that took over from one that was gone
        self.log = LogWriter(run_id, on_stored=execution.checkpoint, source=execution.source)
        self.tail = OutputTail(execution.launcher)
        self.start = LaunchStart()

    def add(self, lines: list[OutputLine]) -> None:
        self.tail.add(lines)
        self.start.add(lines)
        self.log.add(lines)

    def flush(self, patience: float = 0.0) -> None:
        self.log.flush(patience)


def run_job(run_id: int) -> str:
    """Run (or, after a master restart, keep watching) run `run_id`; returns its end state.

    One job watches a run at a time (watching.py): this one only while it holds the run's
    watch lock. When another live job holds it (an RQ worker quit or was killed and its
    work horse watches on, unseen by Redis) this one leaves at once and touches nothing;
    so does a job whose lock another took while its database session was cut.
    """

    with watching.hold(run_id) as mine:
        if not mine:
            log.warning("run %s: %s; this job leaves it to that one", run_id, WATCHED)
            return WATCHED
        try:
            return _run(run_id)
        except watching.WatchLost as exc:
            log.warning("%s", exc)
            return WATCHED


def _run(run_id: int) -> str:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return "deleted"
    if run.state in Run.FINAL_STATES or run.state == Run.QUEUED:
        return run.state  # ended, or not its turn yet (lifecycle.start_next enqueues it then)
    driver = None
    try:
        driver = drivers.get_driver()
        if run.state == Run.STARTED:
            execution = _reattach(run, driver)
            if execution is None:
                return run.state
            log.info("run %s: re-attached", run.pk)
            reattached = True
        else:
            reattached = False
            prepared = _prepare(run, driver)
            if prepared is None:
                return run.state
            spec, hosts = prepared
            if not lifecycle.mark_started(run):
                # Cancelled (or deleted) while the workers were prepared: that cancel may have
                # come before prepare() set things up (a custom worker image), so undo it.
                try:
                    driver.cancel(spec)
                except ClusterError as exc:
                    log.warning("run %s: clean-up after a cancel during prepare: %s", run.pk, exc)
                return run.state
            execution = _launch(run, driver, spec, hosts)
            if isinstance(execution, str):
                return execution
    except watching.WatchLost:
        raise  # another job watches the run: nothing of it is this job's to undo
    except Exception as exc:
        # Whatever went wrong before the run was watched (a Kubernetes API error, a command
        # shlex cannot split, a database error): never leave the run active with no job.
        abandon(run, driver, f"the run's job failed before mpirun was watched: {_describe(exc)}")
        raise
    return _watch(run, driver, execution, reattached)


def _prepare(run: Any, driver: ClusterDriver) -> tuple[RunSpec, list[str]] | None:
    """The run's spec and the hosts the driver prepared for it; None after failing the run
    with the driver's reason. The driver says where checkpoints live; the builder only
    reads the spec."""
    spec = lifecycle.run_spec(run, checkpoints=driver.checkpoint_dir)
    try:
        return spec, driver.prepare(spec)
    except ClusterError as exc:
        lifecycle.mark_failed(run, str(exc))
        return None


def _launch(
    run: Any, driver: ClusterDriver, spec: RunSpec, hosts: list[str], attempt: int = 1
) -> Execution | str:
    """Start mpirun for the STARTED `run` on its prepared `hosts` and store the launch
    record; the run's state instead when mpirun could not start (FAILED) or the run was
    cancelled meanwhile (what was started is killed)."""

    argv = driver_argv(driver, spec, hosts)
    env = rank_environment(spec, settings.MLBENCH_MASTER_URL, lifecycle.worker_token(run))
    try:
        execution = driver.launch(spec, argv, env)
    except (ClusterError, OSError) as exc:
        lifecycle.mark_failed(run, f"could not start mpirun: {exc}")
        return run.state
    record = dict(execution.record)
    if spec.checkpoint_dir:
        record["checkpoint_dir"] = spec.checkpoint_dir
    if attempt > 1:
        record[LAUNCH_ATTEMPT] = attempt
    lifecycle.record_launch(run, record)
    # Cancelled between mark_started and the launch: driver.cancel() found nothing
    # to kill then, so this job kills what it just started.
    state = Run.objects.filter(pk=run.pk).values_list("state", flat=True).first()
    if state != Run.STARTED:
        execution.kill()
        _drain(execution, Output(run.pk, execution))
        return state or "deleted"
    return execution


def _launch_again(run: Any, driver: ClusterDriver) -> str:
    """After Open MPI's transient launch failure (the failed launch killed, which also
    undid what prepare made: local slots, a custom image): say so in the run's log,
    prepare the workers again, launch once more and watch it; returns the end state. The
    run keeps its started_at, so its time limit still counts from the first start."""
    state = _stored_state(run.pk)
    if state != Run.STARTED:
        return state or "deleted"  # cancelled (or deleted) as the first launch ended
    log.warning("run %s: %s", run.pk, RELAUNCH_NOTE)
    note = LogWriter(run.pk)  # mpirun's own kind of line: no rank, stderr
    note.add([OutputLine(None, "stderr", RELAUNCH_NOTE)])
    note.flush(DB_PATIENCE)
    try:
        prepared = _prepare(run, driver)
        if prepared is None:
            return run.state
        execution = _launch(run, driver, *prepared, attempt=2)
    except watching.WatchLost:
        raise
    except Exception as exc:
        abandon(run, driver, f"the run's job failed launching mpirun again: {_describe(exc)}")
        raise
    if isinstance(execution, str):
        return execution
    return _watch(run, driver, execution)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def abandon(run: Any, driver: ClusterDriver | None, reason: str) -> None:
    """Best effort: stop whatever of `run` may run, then mark it FAILED with `reason`."""
    if driver is not None:
        try:
            driver.cancel(lifecycle.run_spec(run))
        except Exception as exc:  # noqa: BLE001 - the FAILED state matters more
            log.warning("run %s: cancel after a failure failed too: %s", run.pk, exc)
            reason += f"; stopping its processes failed: {exc}"
    try:
        lifecycle.mark_failed(run, reason)
    except Exception:  # noqa: BLE001 - the database itself may be what failed
        log.exception("run %s: could not be marked FAILED (%s)", run.pk, reason)


def _reattach(run: Any, driver: ClusterDriver) -> Execution | None:
    """The Execution of a STARTED run whose job was lost, or None after failing the run."""
    spec = lifecycle.run_spec(run)
    try:
        return driver.attach(spec)
    except CannotAttach:
        pass
    if driver.is_running(spec):
        driver.cancel(spec)
        lifecycle.mark_failed(
            run, f"{LOST} (its output stream cannot be re-attached; ranks stopped)"
        )
    else:
        lifecycle.mark_failed(run, LOST)
    return None


def _watch(run: Any, driver: ClusterDriver, execution: Execution, reattached: bool = False) -> str:
    """Store output, enforce the time limit, notice cancellation, decide the end state."""
    output = Output(run.pk, execution, reattached)
    started = run.started_at or dt.datetime.now(dt.UTC)
    deadline = started + dt.timedelta(seconds=int(run.time_limit))
    next_check = 0.0
    waiting = run.reason or ""  # the reason shown while queued ("" once the ranks run)
    try:
        while True:
            output.add(execution.read(READ_SECONDS))
            code = execution.poll()
            if code is not None:
                break
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + STATE_CHECK_SECONDS
                state = _stored_state(run.pk)
                if state != Run.STARTED:
                    # CANCELLED by the API (its driver.cancel usually got there first) or gone.
                    execution.kill()
                    _drain(execution, output)
                    return state or "deleted"
                waiting = _note_waiting(run, execution, waiting)
            if dt.datetime.now(dt.UTC) >= deadline:
                queued = execution.waiting()
                execution.kill()
                _drain(execution, output)
                lifecycle.mark_failed(
                    run,
                    f"time limit of {int(run.time_limit)} s reached; all ranks were stopped"
                    + (f" (they never started: {queued})" if queued else ""),
                )
                return run.state
    except watching.WatchLost:
        raise  # the launch is another job's to watch now: neither killed nor ended here
    except BaseException as exc:
        # RQ's job timeout, a stop command or a bug: never leave ranks behind.
        try:
            execution.kill()
            output.flush()
        finally:
            if Run.objects.filter(pk=run.pk, state=Run.STARTED).exists():
                lifecycle.mark_failed(run, f"the run's job stopped: {type(exc).__name__}: {exc}")
        raise
    output.flush(DB_PATIENCE)
    _note_waiting(run, execution, waiting)  # a queue reason shown last is not its end's
    execution.kill()  # a failed mpirun may leave ranks behind; after exit 0 this is a no-op
    first = LAUNCH_ATTEMPT not in (run.job_metadata or {})
    if first and execution.exit_known and output.start.failed_transiently(code):
        if execution.end_reason() is None:  # mpirun's own end, not the cluster's verdict
            return _launch_again(run, driver)
    return _when_database_answers(lambda: _end(run, execution, output, code))


def _end(run: Any, execution: Execution, output: Output, code: int) -> str:
    """Move the run to its end state by mpirun's exit code (idempotent: safe to retry)."""
    if not Run.objects.filter(pk=run.pk).exists():
        return "deleted"
    run.refresh_from_db()
    if run.state not in Run.ACTIVE_STATES:
        return run.state  # ended already (cancelled, or by a job that held the lock meanwhile)
    why = execution.end_reason()
    output.tail.add_recorded(execution.recorded_rank_ends())
    oom = execution.oom_killed(output.tail.pids())
    if code == 0 and why is None:
        lifecycle.mark_finished(run, 0)
    elif why is not None:
        # The cluster decided the end (a scheduler's limit, a lost node, never startable).
        exit_code = code if execution.exit_known else None
        lifecycle.mark_failed(run, output.tail.with_stderr(why, oom), exit_code=exit_code)
    elif not execution.exit_known:
        # Re-attached to an mpirun that ended while nobody watched and left no exit code.
        lost = UNRECORDED_UNWATCHED if output.reattached else UNRECORDED
        lifecycle.mark_failed(run, output.tail.with_stderr(lost))
    else:
        lifecycle.mark_failed(run, output.tail.reason(code, oom), exit_code=code)
    return run.state


def _note_waiting(run: Any, execution: Execution, shown: str) -> str:
    """Show why the workers still wait in a scheduler's queue as the run's reason, and
    clear it once they run; returns the reason now shown. A database blip skips a turn."""

    reason = execution.waiting() or ""
    if reason == shown:
        return shown
    try:
        lifecycle.note_waiting(run, reason)
    except (OperationalError, InterfaceError):
        drop_connection()
        return shown
    return reason


def _stored_state(run_id: int) -> str | None:
    """The run's state (None once deleted); STARTED while the database cannot be reached,
    so an outage neither ends the run nor stops its output being read."""

    try:
        return Run.objects.filter(pk=run_id).values_list("state", flat=True).first()
    except (OperationalError, InterfaceError):
        drop_connection()
        return Run.STARTED


def _when_database_answers(step: Any, patience: float = DB_PATIENCE) -> Any:
    """`step()`, tried again every second while the database is unreachable, at most
    `patience` seconds: the run's end state must be stored, not lost to a blip."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return step()
        except (OperationalError, InterfaceError):
            if time.monotonic() >= deadline:
                raise
            drop_connection()
            time.sleep(1.0)


def _drain(execution: Execution, output: Output) -> None:
    """Store what the killed processes wrote last (bounded wait)."""
    for _ in range(10):
        output.add(execution.read(0.2))
        if execution.poll() is not None:
            break
    output.flush()
