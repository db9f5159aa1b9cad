"""A study's score from the evaluator's grades (issue 45): every run's outcome is read from
what the master stored (graded evaluations on the benchmark clock), never from what the
run says of itself; misses (a cancelled run, an ungraded one, one past its budget) count
as infinite; the score equals a hand computation of AlgoPerf's rule, the held-out gate
included. The arithmetic alone: tests/results/test_study_score.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from mlbench_worker.shared.evaluation import graded_name

pytestmark = pytest.mark.django_db

STUDY = {
    "name": "graded",
    "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}}],
    "workloads": ["logreg-epsilon"],
    "conditions": ["unlimited", "10mbit"],
    "seeds": [1, 2],
}
LONG_AGO = timezone.now() - dt.timedelta(hours=1)  # past the grace for late results


def _runs(api, study_id: int) -> dict[tuple[str, str, bool, int], Run]:
    body = api.get(f"/api/studies/{study_id}/").json()
    found = {}
    for cell in body["cells"]:
        name = cell["algorithm"].split(" ")[0]
        for run in Run.objects.filter(series_id=cell["series"]):
            found[(name, cell["condition"], cell["variant"], run.seed)] = run
    return found


def _ended(run: Run, reach_at: float | None, *, graded: bool = True, said: float = 5.0,
           state: str = Run.FINISHED) -> None:  # fmt: skip
    """The run ended as `state`; its evaluations on the benchmark clock, graded by the
    evaluator (`graded`) reaching 0.8 at `reach_at` (None: never), and its own word that it
    reached the target at `said` seconds (which must never count)."""
    Run.objects.filter(pk=run.pk).update(
        state=state, started_at=LONG_AGO, finished_at=LONG_AGO,
        summary={"time_to_target": said, "reached": True, "epochs": 2.0,
                 "comm_bytes_to_target": 1000.0 * (reach_at or 0)},
    )  # fmt: skip
    if state != Run.FINISHED:
        return
    evals = [(1.0, 0.4)] + ([(reach_at / 2, 0.5), (reach_at, 0.85)] if reach_at else [])
    for i, (seconds, accuracy) in enumerate(evals):
        meta = {"elapsed": seconds, "epoch": i + 1.0, "step": (i + 1) * 16}
        Metric.objects.create(run=run, name="val_accuracy", value=0.9, metadata=meta)
        if graded:
            Metric.objects.create(run=run, name=graded_name("val_accuracy"), value=accuracy,
                                  metadata=meta)  # fmt: skip


def test_the_score_is_algoperfs_from_the_grades_with_misses_infinite(api, redis_settings):
    created = api.post("/api/studies/", STUDY, format="json")
    assert created.status_code == 201, created.content
    study = created.json()
    runs = _runs(api, study["id"])
    _ended(runs[("allreduce", "unlimited", False, 1)], 10.0)
    _ended(runs[("allreduce", "unlimited", False, 2)], 12.0)
    _ended(runs[("topk", "unlimited", False, 1)], 20.0)
    _ended(runs[("topk", "unlimited", False, 2)], None, state=Run.CANCELLED)  # a miss
    _ended(runs[("allreduce", "10mbit", False, 1)], 30.0)  # at the 30 s budget: counts
    _ended(runs[("allreduce", "10mbit", False, 2)], 30.0)
    _ended(runs[("topk", "10mbit", False, 1)], 15.0)
    _ended(runs[("topk", "10mbit", False, 2)], 15.0)
    variants = {k[0]: r for k, r in runs.items() if k[2]}
    _ended(variants["allreduce"], 10.0)
    before = api.get(f"/api/studies/{study['id']}/").json()
    assert before["pending_runs"] == 1 and before["score"] is None  # one variant still queued
    _ended(variants["topk"], 30.0)  # 3x the best variant time: within tau_max, passes

    body = api.get(f"/api/studies/{study['id']}/").json()
    assert body["pending_runs"] == 0 and body["state"] == "ended"
    cells = {(c["algorithm"].split(" ")[0], c["condition"], c["variant"]): c for c in body["cells"]}
    fast = cells[("allreduce", "unlimited", False)]
    assert fast["median"] == {"time_to_target": 11.0, "bytes_to_target": 11000.0,
                              "epochs_to_target": 2.0, "reached": 2, "seeds": 2}  # fmt: skip
    missed = cells[("topk", "unlimited", False)]
    assert missed["median"]["time_to_target"] is None  # [20, inf]: the even median is infinite
    assert [r["status"] for r in missed["runs"]] == ["reached", "missed"]
    assert "cancelled" in missed["runs"][1]["why"]
    score = body["score"]
    labels = [a["label"] for a in body["algorithms"]]
    # By hand: unlimited, allreduce r=1 (score 1), topk r=inf (0); 10mbit, topk 15 s is the
    # best (1), allreduce r=2 (area from 2 to 4 over 3: 2/3). Overall: the means.
    assert score["by_condition"]["unlimited"] == {labels[0]: 1.0, labels[1]: 0.0}
    assert score["by_condition"]["10mbit"][labels[1]] == 1.0
    assert score["by_condition"]["10mbit"][labels[0]] == pytest.approx(2 / 3)
    assert score["overall"][labels[0]] == pytest.approx(5 / 6)
    assert score["overall"][labels[1]] == pytest.approx(0.5)
    assert score["profiles"]["10mbit"][labels[0]] == [[1.0, 0.0], [2.0, 1.0]]
    assert {p["algorithm"]: p["passed"] for p in score["held_out_passed"]} == dict.fromkeys(
        labels, True
    )


def test_an_ungraded_run_a_late_one_and_a_failed_variant_count_as_misses(api, redis_settings):
    study = api.post("/api/studies/", {**STUDY, "seeds": [1]}, format="json").json()
    runs = _runs(api, study["id"])
    _ended(runs[("allreduce", "unlimited", False, 1)], 10.0)
    _ended(runs[("topk", "unlimited", False, 1)], 5.0, graded=False)  # says 5 s: not graded
    _ended(runs[("allreduce", "10mbit", False, 1)], 20.0)
    _ended(runs[("topk", "10mbit", False, 1)], 31.0)  # past the 30 s budget
    variants = {k[0]: r for k, r in runs.items() if k[2]}
    _ended(variants["allreduce"], 10.0)
    _ended(variants["topk"], 41.0)  # past its budget: a miss, so the gate fails it too

    body = api.get(f"/api/studies/{study['id']}/").json()
    whys = {(c["algorithm"].split(" ")[0], c["condition"], c["variant"]): c["runs"][0]["why"]
            for c in body["cells"]}  # fmt: skip
    assert "not graded by the evaluator" in whys[("topk", "unlimited", False)]
    assert "past its 30 s budget" in whys[("topk", "10mbit", False)]
    labels = [a["label"] for a in body["algorithms"]]
    score = body["score"]
    assert score["overall"] == {labels[0]: 1.0, labels[1]: 0.0}
    assert {p["algorithm"]: p["passed"] for p in score["held_out_passed"]} == {
        labels[0]: True, labels[1]: False,
    }  # fmt: skip
