"""What a run may still write once it has ended: its results are frozen (docs/checking.rst,
"A run's results are frozen when it ends").

Why: a run's worker token stays valid for MLBENCH_RUN_TOKEN_GRACE seconds after the run
ends, so that the points still in flight arrive. Someone holding a leaked token used that
window to post the last step's predictions again, with the labels as predictions, and the
run's graded accuracy became 1.0. The rules, checked here and nowhere else:

- a step's predictions and a run's final model are write-once at all times: the same
  bytes again (a retry) get the stored answer, other bytes a 409 (grading.py, model
  uploads);
- after the end, nothing new is graded: no predictions, no model (409);
- after the end, the run's own token may post only points measured before the end: each
  dated at or before the end, with a benchmark time no longer than the run lasted, and
  none that would add a second evaluation of a step (409 naming the point);
- the summary is write-once after the end.

Reads only; the writers (grading.py, metrics_store, runs.py) call these checks inside the
request that would write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from mlbench_master.common.dates import iso
from mlbench_master.grading import prediction_files
from mlbench_master.runs.metrics_store import Point

# Points whose name starts so are a run's own evaluations: one per step (write-once).
EVALUATION_PREFIX = "val_"
# Clocks of the ranks and of the master differ a little; a point dated this much after
# the end still counts as measured before it.
CLOCK_SLACK = dt.timedelta(seconds=2)


class Frozen(Exception):
    """A write the run's frozen results refuse (the API answers 409 with the message)."""


def ended(run: Run) -> bool:
    return run.finished_at is not None or run.state in Run.FINAL_STATES


def _end(run: Run) -> str:
    when = f" at {iso(run.finished_at)}" if run.finished_at else ""
    return f"run {run.pk} ended ({run.state}{when})"


def refuse_new_grade(run: Run, what: str) -> None:
    """Frozen when `run` has ended: `what` (its predictions of a step, its model) would be a
    new or replacing grade."""
    if ended(run):
        raise Frozen(
            f"{_end(run)}; its results are frozen: {what} can no longer be graded or replaced"
        )


def refuse_replacing(run: Run, what: str) -> None:
    """Frozen: `what` is already stored with other bytes (write-once)."""
    raise Frozen(
        f"run {run.pk} already has {what}, with other bytes; a run's results are write-once: "
        "post the same file again (a retry) or nothing"
    )


def write_once(run: Run, stored: Path, received: Path, what: str) -> bool:
    """True when `received` holds the bytes already stored at `stored` (a retry: answer with
    what is stored, store nothing); Frozen when other bytes are stored there, or when
    nothing is and `run` has ended (no new grade after the end); else False (store it)."""
    if stored.exists():
        if prediction_files.same_bytes(stored, received):
            return True
        refuse_replacing(run, what)
    refuse_new_grade(run, what)
    return False


def check_late_points(run: Run, points: Iterable[Point]) -> None:
    """Frozen when a point posted by `run`'s own token after its end was not measured before
    the end (see the module docstring); nothing when the run has not ended."""
    if not ended(run):
        return
    end = run.finished_at
    lasted = (end - run.started_at).total_seconds() if end is not None and run.started_at else 0.0
    for i, p in enumerate(points):
        where = f"point {i} ({p.name[:60]!r})"
        if end is None or p.date > end + CLOCK_SLACK:
            raise Frozen(
                f"{_end(run)}; {where} is dated {iso(p.date)}, after the end: only points "
                "measured before the end may still arrive"
            )
        elapsed = p.metadata.get("elapsed") if isinstance(p.metadata, dict) else None
        if isinstance(elapsed, int | float) and elapsed > lasted + CLOCK_SLACK.total_seconds():
            raise Frozen(
                f"{_end(run)}; {where} says {elapsed:g} s on the benchmark clock, but the run "
                f"lasted {lasted:.0f} s: it was not measured before the end"
            )


def check_evaluations_once(run: Run, points: list[Point]) -> None:
    """Frozen when a posted evaluation point (val_*) of `run` would be a second one of its
    step: another uid for a (name, step) already stored, or twice in the batch."""
    wanted: dict[tuple[str, object], str | None] = {}
    for p in points:
        if not p.name.startswith(EVALUATION_PREFIX) or not isinstance(p.metadata, dict):
            continue
        step = p.metadata.get("step")
        if step is None:
            continue
        key = (p.name, step)
        if key in wanted and wanted[key] != p.uid:
            raise Frozen(f"the batch holds two {p.name} points of step {step}")
        wanted[key] = p.uid
    if not wanted:
        return
    names = {name for name, _ in wanted}
    stored = Metric.objects.filter(run_id=run.pk, name__in=names).values_list(
        "name", "metadata", "uid"
    )
    for name, metadata, uid in stored:
        step = metadata.get("step") if isinstance(metadata, dict) else None
        key = (name, step)
        if key in wanted and (uid is None or uid != wanted[key]):
            raise Frozen(
                f"run {run.pk} already has its {name} of step {step}; a run's evaluations are "
                "write-once"
            )


def ended_past_grace(run: Run) -> bool:
    """Whether `run` ended more than MLBENCH_RUN_TOKEN_GRACE seconds ago.

    Results still arrive for a short while after mpirun exits (the last metric batches,
    rank 0's summary); after that window a run's record is final. One rule for both the
    worker token's expiry and the summary endpoint. A run that has not ended (no
    `finished_at`) is open.
    """
    if run.finished_at is None:
        return False
    grace = dt.timedelta(seconds=settings.MLBENCH_RUN_TOKEN_GRACE)
    return timezone.now() - run.finished_at > grace
