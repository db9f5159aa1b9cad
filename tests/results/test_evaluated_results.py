"""A run's result is the evaluator's where it graded the run: time to target, accuracy after
time, series statistics, the MLPerf log and the API's `evaluation` field read the grades;
what the run said of itself is kept beside and compared (stored.TOLERANCE)."""

from __future__ import annotations

import pytest

from mlbench_master.results import mllog, stored
from mlbench_master.results.statistics import for_series

pytestmark = pytest.mark.django_db

# (elapsed s, accuracy the run reports, epoch): it claims the light goal (0.8) at 20 s.
CLAIMED = [(10.0, 0.70, 1), (20.0, 0.99, 2), (30.0, 0.99, 3)]


def test_a_run_that_lies_is_graded_by_its_predictions_not_its_word(maker, api):
    series = maker.series()
    liar = maker.run(series, 1, 2, CLAIMED, graded=[0.11, 0.09, 0.10])
    honest = maker.run(series, 2, 2, CLAIMED, graded=[0.70, 0.99, 0.99])
    found = {s.run.pk: s for s in stored.load([liar, honest])}

    assert found[liar.pk].summary["time_to_target"] == 20.0  # what it said of itself
    assert found[liar.pk].time_to_target() is None  # what its predictions say
    assert found[liar.pk].accuracy_after_time() == pytest.approx(0.10)
    assert [m["step"] for m in found[liar.pk].mismatches()] == [10, 20, 30]
    assert found[liar.pk].mismatches()[1] == {"step": 20, "reported": 0.99, "graded": 0.09}
    assert found[honest.pk].time_to_target() == 20.0
    assert found[honest.pk].mismatches() == []

    groups = {g["num_workers"]: g for g in for_series(series)["groups"]}
    assert groups[2]["runs"] == 2 and groups[2]["reached"] == 1  # the liar did not reach

    body = api.get(f"/api/runs/{liar.pk}/").json()["evaluation"]
    assert body["status"] == stored.EVALUATED and body["grades"] == 3
    assert body["time_to_target"] is None and body["accuracy_after_time"] == pytest.approx(0.1)
    assert body["tolerance"] == stored.TOLERANCE
    assert body["mismatches"][0] == {"step": 10, "reported": 0.7, "graded": 0.11}
    listed = {r["id"]: r["evaluation"] for r in api.get("/api/runs/").json()}
    assert listed[honest.pk]["status"] == stored.EVALUATED
    assert listed[honest.pk]["mismatches"] == [] and listed[honest.pk]["time_to_target"] == 20.0

    log = mllog.run_log(liar)
    assert '"eval_accuracy", "value": 0.11' in log and "0.99" not in log


def test_grades_within_the_tolerance_are_no_mismatch(maker):
    close = [0.70 + stored.TOLERANCE * 0.9, 0.99 - stored.TOLERANCE * 0.9, 0.99]
    run = maker.run(None, 3, 2, CLAIMED, graded=close)
    assert stored.load([run])[0].mismatches() == []
    far = maker.run(None, 4, 2, CLAIMED, graded=[0.70, 0.99 - stored.TOLERANCE * 1.1, 0.99])
    assert [m["step"] for m in stored.load([far])[0].mismatches()] == [20]


def test_a_run_without_predictions_is_self_reported_and_keeps_its_own_numbers(maker, api):
    run = maker.run(None, 5, 2, CLAIMED)
    found = stored.load([run])[0]
    assert found.evaluation_status() == stored.SELF_REPORTED
    assert found.time_to_target() == 20.0 and found.accuracy_after_time() == 0.99
    body = api.get(f"/api/runs/{run.pk}/").json()["evaluation"]
    assert body == {
        "status": stored.SELF_REPORTED, "grades": 0, "tolerance": stored.TOLERANCE,
        "mismatches": [], "audit": {"status": "no model"}, "metric": "val_accuracy",
    }  # fmt: skip
    empty = maker.run(None, 6, 2, [])
    assert api.get(f"/api/runs/{empty.pk}/").json()["evaluation"]["status"] == ""


def test_listing_runs_reads_their_evaluations_in_one_query_whatever_their_number(maker, api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert api.get("/api/runs/").status_code == 200
        return len(seen.captured_queries)

    for seed in (1, 2):
        maker.run(None, seed, 2, CLAIMED, graded=[0.7, 0.99, 0.99])
    few = queries()
    for seed in (3, 4, 5, 6):
        maker.run(None, seed, 2, CLAIMED, graded=[0.7, 0.99, 0.99])
    assert queries() == few


def test_every_series_in_a_list_shows_its_runs_evaluations(maker, api):
    """A list of series serializes each series' runs with the response's one context: the
    second series' runs must be read too, not found missing from the first one's."""
    first, second = maker.series(name="a"), maker.series(name="b")
    maker.run(first, 1, 1, CLAIMED, graded=[0.7, 0.99, 0.99])
    maker.run(second, 2, 1, CLAIMED, graded=[0.7, 0.99, 0.99])
    listed = api.get("/api/series/").json()
    statuses = {s["name"]: [r["evaluation"]["status"] for r in s["runs"]] for s in listed}
    assert statuses == {"a": [stored.EVALUATED], "b": [stored.EVALUATED]}, statuses
