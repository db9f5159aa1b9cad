"""A tiny algorithm study through the whole stack (issue 45): two algorithms on task 2 at
two network conditions (the local driver's slots: unlimited and 10 Mbit/s), one seed, and
a held-out variant each, queued by one POST /api/studies/ on the embedded master; every run
trains on 2 ranks, is graded by the evaluator, and the score the API answers is the one
computed by hand from the grades (results/study_score.py's rule). A second study of the same
cells without held-out variants (`held_out: false`) reuses every cell of the first, runs
nothing, and says so: reuse is a property of the cells, not of the held-out rule."""

from __future__ import annotations

import time

import pytest

from mlbench_master.results.study_score import Outcome, score_study

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

STUDY = {
    "name": "e2e study",
    "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.25}}],
    "workloads": ["logreg-epsilon"],
    "conditions": ["unlimited", "10mbit"],
    "seeds": [1],
}


def _finished(master, study_id: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = master.get(f"/api/studies/{study_id}/").json()
        if body["pending_runs"] == 0 and body["score"] is not None:
            return body
        assert time.monotonic() < deadline, f"study {study_id} not done in {timeout} s: {body}"
        time.sleep(2)


@pytest.mark.timeout(1500)  # 6 task-2 runs of 2 ranks one after another, 2 at 10 Mbit/s
def test_a_tiny_study_is_graded_scored_and_reused(idle_master):
    master = idle_master
    created = master.post("/api/studies/", {**STUDY, "reuse": False})
    assert created.status_code == 201, created.text
    body = _finished(master, created.json()["id"], 1200)
    cells, held, reached = {}, {}, 0
    for cell in body["cells"]:
        (run,) = cell["runs"]
        stored = master.run(run["id"])
        assert stored["state"] == "FINISHED", (stored["reason"], master.log_text(run["id"])[-2000:])
        graded = stored["evaluation"]
        assert graded["status"] == "evaluated", graded
        # The study's time is the evaluator's, as the run's page shows it; a miss is one by
        # the grades or by the budget, never by what the run said.
        said = (cell["algorithm"], cell["condition"], cell["variant"], run, graded)
        if run["status"] == "reached":
            reached += 1
            assert run["time_to_target"] == graded["time_to_target"] <= cell["budget"], said
            assert run["bytes_to_target"] == stored["summary"]["comm_bytes_to_target"] > 0
        else:
            assert run["status"] == "missed" and run["time_to_target"] is None, said
            ttt = graded["time_to_target"]
            assert ttt is None or ttt > cell["budget"], said
        outcome = [Outcome(run["time_to_target"])]
        if cell["variant"]:
            held[(cell["algorithm"], cell["workload"])] = outcome
        else:
            cells[(cell["algorithm"], cell["workload"], cell["condition"])] = outcome
    assert reached >= 4, body["cells"]  # task 2 reaches 80 % in its first epoch, in seconds
    by_hand = score_study(cells, held)
    assert body["score"]["overall"] == pytest.approx(by_hand.overall)
    for condition, scores in by_hand.by_condition.items():
        assert body["score"]["by_condition"][condition] == pytest.approx(scores)
    slow = [c for c in body["cells"] if c["condition"] == "10mbit"]
    assert {master.run(c["runs"][0]["id"])["max_bandwidth"] for c in slow} == {10}

    runs_before = {r["id"] for r in master.get("/api/runs/").json()}
    again = master.post("/api/studies/", {**STUDY, "held_out": False})
    assert again.status_code == 201, again.text
    second = _finished(master, again.json()["id"], 120)
    assert second["cells"] and not [c for c in second["cells"] if c["variant"]], second
    assert all(c["reused"] and c["reused_from"] == body["id"] for c in second["cells"])
    assert {c["series"] for c in second["cells"]} == {
        c["series"] for c in body["cells"] if not c["variant"]
    }
    assert {r["id"] for r in master.get("/api/runs/").json()} == runs_before  # nothing queued
    # Scored from the reused grades, without the held-out rule.
    assert second["score"]["overall"] == pytest.approx(score_study(cells, None).overall)
