"""An imported run's predictions graded again by this master's evaluator (scoring.py).

Why: the grades in a bundle are the origin's word. Where this master has the task's test
set (generated sets always: their labels come from the run's seed; real sets when their
files are under MLBENCH_DATA_DIR) it grades every predictions file itself and keeps the
verdict beside the origin's grades, in the run's RunOrigin: per evaluation, both grades,
the examples it counted and whether they agree. The origin's points stay as they came (they
are its record); a disagreement is shown wherever the run is, never hidden and never
silently replaced. The same evaluator code on the same file gives the same number, so any
difference beyond float printing (AGREE) is a disagreement.

What a verdict means for the results (`judged`, read by results/standing.py for the board):
a disagreement makes the run "disputed" and unranked; agreement ranks it on this master's
grades, not the origin's; no verdict (no test set here, no predictions, the evaluator
failed) is "not re-graded here".
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_master.grading import prediction_files, scoring
from mlbench_worker.shared.evaluation import GRADED_PREFIX, graded_name
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

log = logging.getLogger(__name__)
PENDING, DONE, NOT_DONE, NONE = "pending", "re-graded", "not re-graded", "no predictions"
AGREE = 1e-9
# What a verdict means for the run's result (`judged`): this master's evaluator agrees with
# every grade it could compare (its own grades are then the ones ranked), disagrees with
# one (disputed: never ranked), or could not grade the run again (not re-graded here).
AGREES, DISPUTED, UNCHECKED = "agrees", "disputed", "not re-graded here"


@dataclass(frozen=True)
class Judgement:
    """A stored verdict read for the results: its standing, why in words, the disputed
    evaluations with both grades, and this master's grades by step (to rank by)."""

    status: str
    why: str = ""
    disputes: tuple[dict[str, Any], ...] = ()
    here: dict[int, dict[str, float]] = field(default_factory=dict)
    examples: dict[int, int] = field(default_factory=dict)


def judged(verdict: dict[str, Any] | None) -> Judgement:
    """What `verdict` (RunOrigin.regrade) says of the run's grades. A run whose bundle held
    no predictions has nothing this master could grade: UNCHECKED, as where it lacks the
    test set's labels or the evaluator failed."""
    verdict = verdict if isinstance(verdict, dict) else {}
    status = verdict.get("status")
    if status != DONE:
        why = verdict.get("why") or (
            "its grading here has not finished" if status == PENDING else "no verdict is stored"
        )
        return Judgement(UNCHECKED, str(why))
    disputes, here, examples = [], {}, {}
    for step in verdict.get("steps") or []:
        if not isinstance(step, dict) or not isinstance(step.get("step"), int):
            continue
        if step.get("agrees") is False:
            disputes.append(
                {
                    "step": step["step"],
                    "origin": step.get("origin"),
                    "here": step.get("here"),
                    "refused": step.get("refused"),
                }
            )
        elif isinstance(step.get("here"), dict):
            here[step["step"]] = step["here"]
            if isinstance(step.get("examples"), int):
                examples[step["step"]] = step["examples"]
    if disputes:
        return Judgement(DISPUTED, "this master's evaluator disagrees", tuple(disputes))
    return Judgement(AGREES, "", (), here, examples)


def record(run_id: int) -> dict[str, Any]:
    """Grade run `run_id`'s predictions here and store the verdict with its origin."""
    run = Run.objects.get(pk=run_id)
    try:
        verdict = verdict_of(run)
    except Exception as exc:  # noqa: BLE001 - the import stands; the verdict says why
        log.warning("run %s: its predictions could not be graded again: %s", run_id, exc)
        verdict = {"status": NOT_DONE, "why": f"the evaluator failed: {exc}"}
    RunOrigin.objects.filter(run_id=run_id).update(regrade=verdict)
    return verdict


def verdict_of(run: Run) -> dict[str, Any]:
    files = prediction_files.stored(run.pk)
    if not files:
        return {"status": NONE, "why": "the bundle holds no predictions files of this run"}
    theirs, meta = _origin_grades(run)
    steps = []
    for stored in files:
        step_meta = meta.get(stored.step, {})
        dataset = step_meta.get("dataset") or run.dataset_used or run.dataset
        try:
            grade = scoring.grade_file(run, stored.path, dataset, step_meta.get("features"))
        except LabelsUnavailable as exc:
            return {"status": NOT_DONE, "why": f"this master lacks the test set: {exc}"}
        except (PredictionsRefused, scoring.SetRefused, ValueError) as exc:
            steps.append({"step": stored.step, "refused": str(exc), "agrees": False})
            continue
        here = {graded_name(k): v for k, v in grade.metrics.items()}
        given = theirs.get(stored.step)
        # Each grade of the origin's for this step must agree: an honest origin stores one
        # (a step's grade is write-once), so a second one that differs is a disagreement.
        agrees = (
            None
            if given is None
            else all(
                k in given and all(math.isclose(o, v, rel_tol=0, abs_tol=AGREE) for o in given[k])
                for k, v in here.items()
            )
        )
        origin = (
            None if given is None else {k: _farthest(vs, here.get(k)) for k, vs in given.items()}
        )
        step = {
            "step": stored.step,
            "here": here,
            "origin": origin,
            "agrees": agrees,
            "examples": grade.examples,
        }
        if grade.signature:  # which BLEU each side computed (sacrebleu's signatures)
            step["signature"] = {"here": grade.signature, "origin": step_meta.get("signature")}
        steps.append(step)
    return {
        "status": DONE,
        "steps": steps,
        "disagreements": sum(1 for s in steps if s["agrees"] is False),
    }


def _farthest(values: list[float], here: float | None) -> float:
    """Of the origin's grades of one step (one, unless the bundle holds more), the one that
    differs most from this master's: what a disagreement is shown with."""
    return max(values, key=lambda v: abs(v - here)) if here is not None else values[0]


def _origin_grades(
    run: Run,
) -> tuple[dict[int, dict[str, list[float]]], dict[int, dict[str, Any]]]:
    """The origin's grades by step and name (every one the bundle holds), and each step's
    metadata (data set, features)."""
    grades: dict[int, dict[str, list[float]]] = {}
    meta: dict[int, dict[str, Any]] = {}
    rows = Metric.objects.filter(run_id=run.pk, name__startswith=GRADED_PREFIX).values_list(
        "name", "value", "metadata"
    )
    for name, value, metadata in rows:
        step = (metadata or {}).get("step") if isinstance(metadata, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        grades.setdefault(step, {}).setdefault(name, []).append(value)
        meta.setdefault(step, metadata)
    return grades, meta
