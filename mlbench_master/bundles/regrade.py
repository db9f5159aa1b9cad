"""An imported run's predictions graded again by this master's evaluator (grading.py).

Why: the grades in a bundle are the origin's word. Where this master has the task's test
set (generated sets always: their labels come from the run's seed; real sets when their
files are under MLBENCH_DATA_DIR) it grades every predictions file itself and keeps the
verdict beside the origin's grades, in the run's RunOrigin: per evaluation, both grades and
whether they agree. The origin's points stay as they came (they are its record, and the
statistics are computed from them); a disagreement is shown wherever the run is, never
hidden and never silently replaced. The same evaluator code on the same file gives the
same number, so any difference beyond float printing (AGREE) is a disagreement.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from mlbench_master import grading, prediction_files
from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_worker.shared.evaluation import GRADED_PREFIX, graded_name
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

log = logging.getLogger(__name__)
PENDING, DONE, NOT_DONE, NONE = "pending", "re-graded", "not re-graded", "no predictions"
AGREE = 1e-9


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
            grade = grading.grade_file(run, stored.path, dataset, step_meta.get("features"))
        except LabelsUnavailable as exc:
            return {"status": NOT_DONE, "why": f"this master lacks the test set: {exc}"}
        except (PredictionsRefused, grading.SetRefused, ValueError) as exc:
            steps.append({"step": stored.step, "refused": str(exc), "agrees": False})
            continue
        here = {graded_name(k): v for k, v in grade.metrics.items()}
        origin = theirs.get(stored.step)
        agrees = (
            None
            if origin is None
            else all(
                k in origin and math.isclose(origin[k], v, rel_tol=0, abs_tol=AGREE)
                for k, v in here.items()
            )
        )
        steps.append({"step": stored.step, "here": here, "origin": origin, "agrees": agrees})
    return {
        "status": DONE,
        "steps": steps,
        "disagreements": sum(1 for s in steps if s["agrees"] is False),
    }


def _origin_grades(run: Run) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, Any]]]:
    """The origin's grades by step, and each step's metadata (data set, features)."""
    grades: dict[int, dict[str, float]] = {}
    meta: dict[int, dict[str, Any]] = {}
    rows = Metric.objects.filter(run_id=run.pk, name__startswith=GRADED_PREFIX).values_list(
        "name", "value", "metadata"
    )
    for name, value, metadata in rows:
        step = (metadata or {}).get("step") if isinstance(metadata, dict) else None
        if step is None:
            continue
        grades.setdefault(int(step), {})[name] = value
        meta.setdefault(int(step), metadata)
    return grades, meta
