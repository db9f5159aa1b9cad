"""A study's numbers: each run's outcome read from the evaluator's grades, each cell's
medians, and the score (results/study_score.py) once every run has its outcome.

Why from the grades and not from what runs report (docs/studies.rst, "Who says a run
reached the target"): the time to target of a run is the benchmark clock of the first
evaluation the evaluator graded at the target (results/stored.py reads it so for every
run), so an algorithm cannot score by reporting. What counts as a miss (infinite time):

- a run that ended FAILED or CANCELLED (also by a cancelled study);
- a FINISHED run the evaluator did not grade (no predictions: "not graded"), once its
  results had their grace period to arrive; until then it is pending;
- a run whose graded time to target is past its workload's budget.

Bytes and epochs to target are the trainer's counts in the run's summary (the harness
counts the bytes, issue 44; the run stops at the evaluation that reached the target, so its
epochs are the epochs to target); they are read only for a run the grades say reached it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from mlbench_master.api.models import Run, Study, StudyCell
from mlbench_master.results import kept_runs, stored
from mlbench_master.results.run_result import RunResult
from mlbench_master.results.study_score import Outcome, StudyScore, score_study, summarize
from mlbench_master.runs.frozen import ended_past_grace
from mlbench_worker.shared import study_suite

PENDING, REACHED, MISSED = "pending", "reached", "missed"


def run_outcome(run: Run, result: RunResult, budget: float) -> tuple[str, str, Outcome | None]:
    """(status, why, outcome) of one run of a cell whose budget is `budget` seconds;
    outcome None while pending."""
    if run.state not in Run.FINAL_STATES:
        return PENDING, f"{run.state.lower()}", None
    if run.state != Run.FINISHED:
        return MISSED, f"{run.state.lower()}: counted as a miss", Outcome(None)
    if result.evaluation != stored.EVALUATED:
        if not ended_past_grace(run):
            return PENDING, "waiting for its grades", None
        return MISSED, "not graded by the evaluator: counted as a miss", Outcome(None)
    seconds = result.time_to_target
    if seconds is None:
        return MISSED, "the grades never reached the target", Outcome(None)
    if seconds > budget:
        return MISSED, f"reached at {seconds:g} s, past its {budget:g} s budget", Outcome(None)
    summary = run.summary or {}
    return REACHED, "", Outcome(seconds, summary.get("comm_bytes_to_target"),
                                summary.get("epochs"))  # fmt: skip


def _budget(study: Study, cell: StudyCell) -> float:
    if cell.variant:
        return float(study.variants[cell.workload]["time_budget"])
    return float(study_suite.time_budget(cell.workload, study.suite_version))


def _finite(x: float) -> float | None:
    """JSON has no infinity: a miss is null (with `reached` saying so)."""
    return x if math.isfinite(x) else None


def study_numbers(study: Study) -> dict[str, Any]:
    """The study's cells with their runs and medians, and its score once complete (what
    GET /api/studies/<id>/ answers beside the study's own fields)."""
    return numbers_of([study])[study.pk]


def numbers_of(studies: list[Study], runs: list[Run] | None = None) -> dict[int, dict[str, Any]]:
    """`study_numbers` of each of `studies` by id, read together: their cells, runs, grades
    and reused cells' first studies in one query each, however many cells and runs they
    have (`runs`: their runs in id order where the caller read them already). Cells come
    prefetched (`prefetch_related("cells")`) or are read here."""
    cells_of = _cells_of(studies)
    series_ids = {c.series_id for cells in cells_of.values() for c in cells if c.series_id}
    if runs is None:
        runs = list(Run.objects.filter(series_id__in=series_ids).order_by("id"))
    runs = [r for r in runs if r.series_id in series_ids]
    runs_of: dict[int, list[tuple[Run, RunResult]]] = defaultdict(list)
    for run, result in zip(runs, kept_runs.results_of(runs), strict=True):
        runs_of[run.series_id].append((run, result))
    first = _first_studies([c for cells in cells_of.values() for c in cells if c.reused])
    return {s.pk: _numbers(s, cells_of[s.pk], runs_of, first) for s in studies}


def _cells_of(studies: list[Study]) -> dict[int, list[StudyCell]]:
    """Each study's cells in id order: the prefetched ones, else one query for all."""
    prefetched = all("cells" in getattr(s, "_prefetched_objects_cache", {}) for s in studies)
    if prefetched:
        return {s.pk: list(s.cells.all()) for s in studies}
    out: dict[int, list[StudyCell]] = {s.pk: [] for s in studies}
    for cell in StudyCell.objects.filter(study__in=studies).order_by("id"):
        out[cell.study_id].append(cell)
    return out


def _numbers(
    study: Study,
    cells: list[StudyCell],
    runs_of: dict[int, list[tuple[Run, RunResult]]],
    first: dict[int, int],
) -> dict[str, Any]:
    shown, base, held = [], {}, {}
    pending = 0
    for cell in cells:
        budget = _budget(study, cell)
        rows, outcomes = [], []
        for run, result in runs_of.get(cell.series_id, []):
            status, why, outcome = run_outcome(run, result, budget)
            pending += status == PENDING
            rows.append({
                "id": run.pk, "seed": run.seed, "state": run.state, "status": status,
                "why": why, "evaluation": result.evaluation,
                "time_to_target": outcome.seconds if outcome else None,
                "bytes_to_target": outcome.bytes if outcome and outcome.seconds else None,
                "epochs_to_target": outcome.epochs if outcome and outcome.seconds else None,
            })  # fmt: skip
            if outcome is not None:
                outcomes.append(outcome)
        complete = bool(rows) and len(outcomes) == len(rows)
        median = summarize(outcomes) if complete else None
        if complete:
            key = (cell.algorithm, cell.workload)
            (held if cell.variant else base)[key + (() if cell.variant else (cell.condition,))] = (
                outcomes
            )
        shown.append({
            "algorithm": cell.algorithm, "workload": cell.workload,
            "condition": cell.condition, "variant": cell.variant, "series": cell.series_id,
            "reused": cell.reused, "reused_from": first.get(cell.series_id) if cell.reused else None,
            "budget": budget, "runs": rows,
            "median": None if median is None else {
                "time_to_target": _finite(median.seconds),
                "bytes_to_target": _finite(median.bytes),
                "epochs_to_target": _finite(median.epochs),
                "reached": median.reached, "seeds": median.seeds,
            },
        })  # fmt: skip
    expected = (sum(not c.variant for c in cells), sum(c.variant for c in cells))
    score = None
    if pending == 0 and cells and (len(base), len(held)) == expected:
        score = score_json(score_study(base, held if study.variant_seed is not None else None))
    return {"cells": shown, "pending_runs": pending, "score": score}


def _first_studies(reused: list[StudyCell]) -> dict[int, int]:
    """series id -> the study that ran it first (its cell not reused), for reused cells."""
    if not reused:
        return {}
    rows = (
        StudyCell.objects.filter(series_id__in={c.series_id for c in reused}, reused=False)
        .order_by("id")
        .values_list("series_id", "study_id")
    )
    first: dict[int, int] = {}
    for series_id, study_id in rows:
        first.setdefault(series_id, study_id)
    return first


def score_json(score: StudyScore) -> dict[str, Any]:
    """The score as JSON: ratios (null: infinite), scores per condition and overall, the
    profiles as [tau, rho] steps, and the held-out gate."""
    return {
        "tau_max": score.tau_max,
        "held_out": bool(score.held_out_passed),
        "held_out_passed": [
            {"algorithm": a, "workload": w, "passed": ok}
            for (a, w), ok in score.held_out_passed.items()
        ],
        "ratios": [
            {
                "algorithm": a,
                "workload": w,
                "condition": c,
                "ratio": _finite(r),
                "time": _finite(score.times[(a, w, c)]),
            }
            for (a, w, c), r in score.ratios.items()
        ],  # fmt: skip
        "by_condition": score.by_condition,
        "overall": score.overall,
        "profiles": {
            c: {a: [list(step) for step in score.profile(a, c)] for a in score.algorithms}
            for c in score.conditions
        },
    }
