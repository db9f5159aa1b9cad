"""Reconciliation: putting every active run whose job is gone back on a path to a
truthful end.

Called at master start-up (reason "master restarted; run lost") and every
RECONCILE_SECONDS by the collector (reason JOB_DIED), because when the RQ work horse
watching a run dies (OOM killer, segfault) nothing else would ever end the run. The
collector's rounds decide nothing while Redis does not answer: whether a job is queued
cannot be known then, and a Redis blip must not end a run that is being watched.

Whether a job still watches a run is asked of the run's watch lock (watching.py), not of
Redis alone: a work horse whose RQ worker quit or was killed, or whose Redis was
restarted, is unknown to Redis but still holds the lock, and its run is left to it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.cluster import drivers
from mlbench_master.cluster.base import CannotAttach, ClusterDriver
from mlbench_master.runs import jobqueue, lifecycle, unsettled, watching
from mlbench_master.runs.jobs import LOST, abandon

RECONCILE_SECONDS = 30.0  # how often the collector looks for runs whose job died
JOB_DIED = "the run's job died (its RQ worker process is gone)"
WATCHED_UNSEEN = (
    "its job still watches it (it holds the run's watch lock) though no RQ worker in Redis "
    "executes it; left to that job"
)


def reconcile(lost: str = LOST, min_age: float = 0.0, wait_for_redis: bool = False) -> list[str]:
    """Re-enqueue or end every active run no live job looks after.

    `min_age` leaves alone runs created or started within that many seconds (their job
    may not have been taken yet). `wait_for_redis` (the collector's periodic rounds): when
    Redis does not answer, nothing is done (a live job may be watching every run; the next
    round asks again). A run whose job is queued, or executed by a live RQ worker, or that a
    live job watches (it holds the run's watch lock, whatever Redis knows), is left alone.
    Otherwise:

    - INITIALIZED: its job is enqueued again.
    - STARTED, and the driver can re-attach to the launch (both drivers: the output files
      and the exit code mpirun's wrapper records): re-enqueued; `run_job` reads the rest of the
      output and ends the run by mpirun's real exit code (FINISHED on 0).
    - STARTED, the driver cannot re-attach (its files are gone, e.g. Kubernetes pod 0 was
      replaced): its ranks are stopped and the run is FAILED with `lost` and why.
    - Redis refuses the job: the ranks are stopped and the run FAILED (never an exception).

    Then, when no run is active, the first queued run is started (lifecycle.start_next).

    First of all, a run the last master stopped but could not mark (its database did not
    answer then: unsettled.py) is FAILED with the reason that master recorded.

    Returns a line per run handled (for the launcher's log).
    """

    notes = _settle_stopped()
    if wait_for_redis and not jobqueue.answers():
        return notes + [f"nothing: Redis at {jobqueue.location()} does not answer"]
    busy = jobqueue.jobs_in_progress()
    driver = None
    settled = timezone.now() - dt.timedelta(seconds=min_age)
    for run in Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("created_at"):
        if run.job_id and (run.job_id in busy or jobqueue.job_waiting(run.job_id)):
            continue
        if min_age and max(filter(None, [run.created_at, run.started_at])) > settled:
            continue
        if watching.watched(run.pk):
            notes.append(f"run {run.pk}: {WATCHED_UNSEEN}")
            continue
        if run.state == Run.INITIALIZED:
            try:
                lifecycle.enqueue_run(run)
                notes.append(f"run {run.pk}: enqueued again (its job was lost)")
            except lifecycle.QueueUnavailable as exc:
                notes.append(f"run {run.pk}: FAILED ({exc})")
            continue
        driver = driver or drivers.get_driver()
        why = _cannot_attach(driver, run)
        if why is not None:
            abandon(run, driver, f"{lost} ({why}; its ranks were stopped)")
            notes.append(f"run {run.pk}: FAILED, ranks stopped ({run.reason})")
            continue
        try:
            lifecycle.enqueue_run(run)
        except lifecycle.QueueUnavailable as exc:
            abandon(run, driver, str(exc))  # enqueue_run failed it already; stop the ranks
            notes.append(f"run {run.pk}: FAILED, ranks stopped ({exc})")
            continue
        what = (
            "ranks still running" if driver.is_running(lifecycle.run_spec(run)) else "ranks ended"
        )
        notes.append(f"run {run.pk}: {what}; its output is read again to end it truthfully")
    notes += _release_leftovers(driver or drivers.get_driver())
    started = lifecycle.start_next()  # the queue moves on when the active run ended unseen
    if started is not None:
        notes.append(f"run {started.pk}: started from the queue")
    return notes


def _settle_stopped() -> list[str]:
    """FAILED, with the reason recorded then, for each run a stopping master stopped but
    could not mark; the records are forgotten once read (the others had ended already)."""

    home = Path(settings.MLBENCH_HOME)
    waiting = unsettled.pending(home)
    notes = []
    for run_id, reason in waiting.items():
        run = Run.objects.filter(pk=int(run_id), state__in=Run.ACTIVE_STATES).first()
        if run is not None:
            abandon(run, drivers.get_driver(), reason)  # its processes are gone; cancel makes sure
            notes.append(f"run {run.pk}: FAILED ({run.reason})")
    unsettled.forget(home, waiting)
    return notes


def _release_leftovers(driver: ClusterDriver) -> list[str]:
    """What the driver set up for runs no longer active (the local slots' namespaces a
    crash left behind) is removed; the ids are read after the runs above were settled."""
    active = {
        str(pk)
        for pk in Run.objects.filter(state__in=Run.ACTIVE_STATES).values_list("pk", flat=True)
    }
    try:
        removed = driver.release_leftovers(active)
    except Exception as exc:  # noqa: BLE001 - the next round tries again
        return [f"left-overs not removed: {exc}"]
    return [f"removed {', '.join(removed)} (left over by runs that ended)"] if removed else []


def _cannot_attach(driver: ClusterDriver, run: object) -> str | None:
    """Why the driver cannot re-attach to `run`'s launch; None when it can."""
    try:
        driver.attach(lifecycle.run_spec(run))
    except CannotAttach as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - cannot re-attach is the answer
        return "no launch of it is recorded to re-attach to"
    return None
