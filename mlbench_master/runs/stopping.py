"""When the master itself stops (`mlbench down`, a master pod ending): its runs stop too.

Why a module of its own: stopping has two halves that must not depend on each other.

1. Recording: every active run is marked FAILED ("the master was stopped during the run")
   and cancelled by the driver with its launch record. This needs the database, which may
   be what is down; it is tried in a thread for at most DATABASE_PATIENCE seconds, so a
   database that hangs cannot hold the stop up.
2. Stopping: the driver's `stop_all` ends every launch of this master, of any run, found by
   its own means (environment markers, job names), never through the database or Redis.

A run whose processes were stopped but which could not be marked is recorded in
MLBENCH_HOME (unsettled.py); the next start's reconciliation marks it FAILED with
SETTLED_AT_START. The report says, run by run, what was recorded and what was not.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connections

from mlbench_master.cluster import drivers
from mlbench_master.runs import unsettled

MASTER_STOPPED = "the master was stopped during the run"
SETTLED_AT_START = (
    "the master was stopped during the run while the database did not answer; its "
    "processes were stopped then and the run was settled at the next start"
)
LEFT_BY_SUPERVISOR = (
    "the master was stopped during the run without stopping it (its supervisor was not "
    "running or did not answer); `mlbench down` stopped its processes and the run was "
    "settled at the next start"
)
DATABASE_PATIENCE = 15.0  # seconds the marking may take before the stop goes on without it


@dataclass
class StopReport:
    """What a stop did: the runs marked FAILED, those stopped but not marked, what failed."""

    marked: list[int] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # runs whose processes stop_all found
    unrecorded: list[str] = field(default_factory=list)
    database_error: str | None = None
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report in words, one line each, for `mlbench down` and the pod's log."""
        out = [f"run {pk} was stopped and marked FAILED ({MASTER_STOPPED})" for pk in self.marked]
        for run_id in self.unrecorded:
            out.append(
                f"run {run_id} was stopped but could not be marked FAILED: the database did "
                f"not answer ({self.database_error}); it will be settled at the next start"
            )
        if self.database_error and not self.unrecorded:
            out.append(
                f"the database did not answer ({self.database_error}): no run could be "
                "marked FAILED; a run left active will be settled at the next start"
            )
        return out + self.problems


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0].strip() if lines else type(error).__name__


def get_driver_or_say(report: StopReport) -> Any:
    """The configured driver, or None with the reason added to the report's problems."""
    try:
        return drivers.get_driver()
    except Exception as error:  # noqa: BLE001 - stopping goes on with what it can do
        report.problems.append(f"the cluster driver cannot be set up: {_first_line(error)}")
        return None


def mark_runs_failed(
    report: StopReport, driver: Any, patience: float = DATABASE_PATIENCE
) -> StopReport:
    """Mark every active run FAILED and cancel it with its launch record (the state first:
    its job then sees the run ended and does not blame the ranks). The queue does not move:
    the master is stopping. Gives up after `patience` seconds without the database."""
    if not apps.ready:  # the master stopped before it set Django up: nothing to record
        return report
    marked: list[int] = []
    problems: list[str] = []
    errors: list[str] = []
    done = threading.Event()

    def work() -> None:
        try:
            _mark(driver, marked, problems)
        except Exception as error:  # noqa: BLE001 - the database is what failed
            errors.append(_first_line(error))
        finally:
            connections.close_all()  # this thread's own connection
            done.set()

    threading.Thread(target=work, name="mark-runs-failed", daemon=True).start()
    if not done.wait(patience):
        errors.append(f"no answer within {patience:g} s")
    report.marked += list(marked)
    report.problems += list(problems)
    report.database_error = errors[0] if errors else None
    return report


def _mark(driver: Any, marked: list[int], problems: list[str]) -> None:
    # Here, not at the top: `mlbench_master down` loads this module without Django set up.
    from mlbench_master.api.models import Run
    from mlbench_master.runs import lifecycle

    for run in Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("pk"):
        if lifecycle.mark_failed(run, MASTER_STOPPED, start_next_run=False):
            marked.append(run.pk)
        if driver is None:
            continue
        try:
            driver.cancel(lifecycle.run_spec(run))
        except Exception as error:  # noqa: BLE001 - stop_all tries again
            problems.append(f"run {run.pk}: cancelling it failed: {_first_line(error)}")


def stop_launches(report: StopReport, driver: Any, home: Path) -> StopReport:
    """The driver's stop_all (no database), then the runs it found that could not be
    marked are recorded under `home` for the next start."""
    if driver is not None:
        try:
            report.found = [str(run_id) for run_id in driver.stop_all()]
        except Exception as error:  # noqa: BLE001 - said, never raised: the stop goes on
            report.problems.append(f"could not stop everything the runs started: {error}")
    if report.database_error:
        marked = {str(pk) for pk in report.marked}
        report.unrecorded = [run_id for run_id in report.found if run_id not in marked]
        if report.unrecorded:
            unsettled.record(home, report.unrecorded, SETTLED_AT_START)
    return report


def stop_runs(patience: float = DATABASE_PATIENCE) -> StopReport:
    """Both halves in one go (the master pod's preStop hook: the RQ worker is another
    container, stopped by Kubernetes after this returns)."""
    report = StopReport()
    driver = get_driver_or_say(report)
    mark_runs_failed(report, driver, patience)
    return stop_launches(report, driver, Path(settings.MLBENCH_HOME))
