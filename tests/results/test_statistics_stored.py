"""The statistics of a stored series equal a computation by hand from what the API serves
for its runs (GET /api/metrics/<run>/ and the run's summary)."""

from __future__ import annotations

import math

import pytest

from mlbench_master.api.models import Run
from mlbench_master.results.statistics import for_series

pytestmark = pytest.mark.django_db

# seed -> (evaluations of the 1-worker run, of the 2-worker run): (elapsed s, accuracy, epoch)
CURVES = {
    1: ([(10.0, 0.6, 1), (20.0, 0.82, 2)], [(6.0, 0.7, 1), (11.0, 0.85, 2)]),
    2: ([(12.0, 0.7, 1), (24.0, 0.81, 2)], [(7.0, 0.75, 1), (13.0, 0.80, 2)]),
    3: ([(9.0, 0.65, 1), (18.0, 0.79, 2), (27.0, 0.84, 3)], [(5.0, 0.6, 1), (10.0, 0.7, 2)]),
}


def _by_hand(api, runs: list[Run]) -> dict:
    """Median, mean, sample sd, olympic mean of the time to target from the stored
    `time_to_target` points; a run without one counts as the slowest."""
    times, missing = [], 0
    for run in runs:
        body = api.get(f"/api/metrics/{run.pk}/?metric_type=run&metric_filter=time_to_target")
        points = body.json().get("time_to_target", [])
        if points:
            times.append(points[0]["value"])
        else:
            missing += 1
    times.sort()
    n = len(times)
    mean = sum(times) / n
    sd = math.sqrt(sum((t - mean) ** 2 for t in times) / (n - 1)) if n > 1 else None
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    kept = times[1 : n - (1 - missing)] if missing <= 1 else []
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "median": median,
        "olympic": sum(kept) / len(kept) if kept else None,
        "missing": missing,
    }


def test_series_statistics_equal_a_hand_computation_from_stored_metrics(maker, api):
    series = maker.series()
    runs = {1: [], 2: []}
    for seed, (one, two) in CURVES.items():
        runs[1].append(maker.run(series, seed, 1, one))
        runs[2].append(maker.run(series, seed, 2, two))
    out = for_series(series)
    assert out["target"]["task"] == "logreg-epsilon" and out["target"]["value"] == 0.8
    assert out["target"]["synthetic"] is True
    groups = {g["num_workers"]: g for g in out["groups"]}
    for workers, members in runs.items():
        hand = _by_hand(api, members)
        stat = groups[workers]["time_to_target"]
        assert stat["n"] == hand["n"]
        assert stat["median"] == pytest.approx(hand["median"])
        assert stat["mean"] == pytest.approx(hand["mean"])
        assert stat["sd"] == pytest.approx(hand["sd"])
        assert stat["olympic_mean"] == pytest.approx(hand["olympic"])
        assert groups[workers]["reached"] == hand["n"]
        assert groups[workers]["runs"] == 3
    # 1 worker: 20, 24, 27 all reached; 2 workers: 11, 13 and seed 3 never reached 0.8.
    assert groups[1]["valid"] and groups[2]["valid"]
    assert groups[2]["time_to_target"]["olympic_mean"] == 13.0
    # Speed-ups against the 1-worker median (24): 24/11 and 24/13, their median the mean.
    assert groups[2]["speedup"]["median"] == pytest.approx((24 / 11 + 24 / 13) / 2)
    assert groups[2]["efficiency"]["max"] == pytest.approx(24 / 11 / 2)
    # Accuracy after time: each run's last stored val_accuracy (the summary's).
    last = [
        api.get(f"/api/metrics/{r.pk}/?metric_type=run&metric_filter=val_accuracy").json()[
            "val_accuracy"
        ][-1]["value"]
        for r in runs[2]
    ]
    assert groups[2]["accuracy_after_time"]["mean"] == pytest.approx(sum(last) / 3)
    # The curves are the stored points on the benchmark clock.
    curve = next(c for c in out["curves"] if c["run"] == runs[1][2].pk)
    assert curve["points"] == [[9.0, 0.65], [18.0, 0.79], [27.0, 0.84]]
    assert curve["seed"] == 3 and curve["reached"] is True
    assert set(curve["time_split"]) == {"data", "compute", "communication"}


def test_a_second_diverged_run_makes_the_group_not_valid(maker):
    series = maker.series(worker_counts=[1])
    maker.run(series, 1, 1, [(10.0, 0.85, 1)])
    maker.run(series, 2, 1, [(10.0, 0.5, 1), (20.0, 0.3, 2)])  # diverged: never reached
    maker.run(series, 3, 1, [(11.0, 0.81, 1)])
    group = for_series(series)["groups"][0]
    assert (group["reached"], group["valid"]) == (2, True)
    assert group["time_to_target"]["olympic_mean"] == 11.0
    maker.run(series, 4, 1, [(9.0, 0.2, 1)], state=Run.FAILED, summary=False)
    group = for_series(series)["groups"][0]
    assert (group["runs"], group["reached"], group["valid"]) == (4, 2, False)
    assert "2 of 4 runs did not reach the target" in group["invalid_reason"]


def test_failed_run_without_summary_is_read_from_its_points(maker):
    series = maker.series(worker_counts=[1])
    failed = maker.run(series, 1, 1, [(5.0, 0.9, 1)], state=Run.FAILED, summary=False)
    queued = Run.objects.create(name="q", series=series, seed=2, num_workers=1, state=Run.QUEUED)
    out = for_series(series)
    group = out["groups"][0]
    assert (group["runs"], group["pending"], group["reached"]) == (1, 1, 1)
    assert group["time_to_target"]["median"] == 5.0  # from its time_to_target point
    assert group["accuracy_after_time"]["n"] == 0  # a failed run's numbers are not a result
    assert {c["run"] for c in out["curves"]} == {failed.pk, queued.pk}


def test_an_ended_runs_result_is_kept_and_a_later_point_shows_at_once(maker, settings):
    """An ended run's result is made once and read back (its row current: made at the
    version the database holds); an active run's is made at each read. A point stored
    later, by anyone, shows at the next read for all of them, the one ended long ago too
    (the old in-process store kept an ended run's first result until the process ended)."""
    import datetime as dt

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from mlbench_master.results import kept_runs
    from mlbench_master.results.models import StoredResult
    from tests.results.conftest import START

    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    now = timezone.now()
    final = maker.run(None, 1, 1, [(10.0, 0.6, 1)])
    Run.objects.filter(pk=final.pk).update(finished_at=now - dt.timedelta(seconds=61))
    recent = maker.run(None, 3, 1, [(10.0, 0.6, 1)])  # in its grace: its last points may come
    Run.objects.filter(pk=recent.pk).update(finished_at=now - dt.timedelta(seconds=5))
    active = maker.run(None, 2, 1, [(10.0, 0.6, 1)], state=Run.STARTED)
    order = [final, recent, active]

    def results():
        by_pk = {r.pk: r for r in Run.objects.filter(pk__in=[r.pk for r in order])}
        return kept_runs.results_of([by_pk[r.pk] for r in order])

    first = results()
    rows = {pk: (made, version) for pk, made, version in StoredResult.objects.filter(
        run__in=order).values_list("run_id", "made", "version")}  # fmt: skip
    assert rows[final.pk][0] == rows[final.pk][1] and rows[recent.pk][0] == rows[recent.pk][1]
    assert rows[active.pk][0] is None
    with CaptureQueriesContext(connection) as read:
        assert results() == first
    # The runs read again to be made (with their origins): the active one only.
    remade = [q["sql"] for q in read.captured_queries if '"api_runorigin" ON' in q["sql"]]
    assert len(remade) == 1 and str(active.pk) in remade[0] and str(final.pk) not in remade[0]
    late = START + dt.timedelta(seconds=60)
    points = [maker._point(r, "val_accuracy", 0.9, late, {"elapsed": 30.0, "step": 99})
              for r in order]  # fmt: skip
    assert maker.client.post("/api/metrics/", points, format="json").status_code == 201
    for later in results():
        assert len(later.curve) == 2 and later.curve[-1] == (30.0, 0.9)


def test_a_change_while_a_result_is_made_leaves_it_not_current(maker, monkeypatch):
    """A writer that commits while a reader makes a run's result raises its version after
    the reader read it: the reader's result is answered but kept as not current, and the
    next read makes it again with the change."""
    from mlbench_master.api.models import Metric
    from mlbench_master.results import kept_runs
    from mlbench_master.results.models import StoredResult
    from tests.results.conftest import START

    run = maker.run(None, 1, 1, [(10.0, 0.6, 1)])
    make = kept_runs.compute

    def racing(runs):
        made = make(runs)  # the points as they were, then a grade lands
        Metric.objects.create(run=run, name="evaluated_val_accuracy", value=0.6, date=START,
                              metadata={"elapsed": 10.0, "step": 10, "epoch": 1})  # fmt: skip
        return made

    monkeypatch.setattr(kept_runs, "compute", racing)
    assert kept_runs.results_of([run])[0].evaluation == "self-reported, not evaluated"
    row = StoredResult.objects.get(run=run)
    assert row.made != row.version
    monkeypatch.setattr(kept_runs, "compute", make)
    assert kept_runs.results_of([run])[0].evaluation == "evaluated"
