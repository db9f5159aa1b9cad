"""The series statistics on hand-computed cases: every expected number below was worked
out by hand from the inputs written next to it, not by running the code."""

from __future__ import annotations

import math

import pytest

from mlbench_master.results.statistics import RunResult, band, describe, olympic_mean, summarize

TARGET = {"task": "logreg-epsilon", "goal": "light", "metric": "val_accuracy", "value": 0.8}


def run(i: int, workers: int, ttt: float | None, state: str = "FINISHED", **kw) -> RunResult:
    return RunResult(run=i, seed=i, num_workers=workers, state=state, time_to_target=ttt, **kw)


def test_describe_five_values():
    # 10, 12, 14, 16, 28: mean 16, median 14; deviations -6 -4 -2 0 12, squares 36+16+4+0+144
    # = 200, sample variance 200/4 = 50, sd = sqrt(50) = 7.0711; cv = 7.0711/16 = 0.44194;
    # olympic: drop 10 and 28, (12+14+16)/3 = 14.
    s = describe([16, 10, 28, 12, 14])
    assert s["n"] == 5
    assert s["median"] == 14
    assert s["mean"] == 16
    assert s["sd"] == pytest.approx(math.sqrt(50))
    assert s["cv"] == pytest.approx(0.441942, rel=1e-5)
    assert (s["min"], s["max"]) == (10, 28)
    assert s["olympic_mean"] == 14


def test_describe_small_samples_leave_undefined_values_null():
    assert describe([]) == {
        "n": 0, "median": None, "mean": None, "sd": None, "cv": None, "min": None,
        "max": None, "olympic_mean": None,
    }  # fmt: skip
    one = describe([3.0])
    assert (one["mean"], one["sd"], one["cv"], one["olympic_mean"]) == (3.0, None, None, None)
    two = describe([2.0, 4.0])  # sd sqrt(2) (sample), olympic: nothing left after dropping 2
    assert two["sd"] == pytest.approx(math.sqrt(2)) and two["olympic_mean"] is None


def test_olympic_mean_counts_one_non_reaching_run_as_the_slowest():
    # 4 reached (10, 12, 14, 30) + 1 not reached (slowest): drop 10 and the missing run,
    # (12 + 14 + 30) / 3 = 18.6667
    assert olympic_mean([30, 12, 10, 14], not_reached=1) == pytest.approx(56 / 3)
    assert olympic_mean([30, 12, 10, 14], not_reached=2) is None
    assert olympic_mean([5.0, 7.0], not_reached=1) == 7.0


def test_validity_flips_when_a_second_run_misses_the_target():
    one_miss = [run(1, 1, 10.0), run(2, 1, 12.0), run(3, 1, None)]
    group = summarize(one_miss, TARGET)["groups"][0]
    assert (group["runs"], group["reached"], group["valid"]) == (3, 2, True)
    assert group["invalid_reason"] == ""
    assert group["time_to_target"]["olympic_mean"] == 12.0  # drop 10 and the missing run
    assert group["time_to_target"]["n"] == 2 and group["time_to_target"]["median"] == 11.0

    two_misses = [*one_miss, run(4, 1, None, state="FAILED")]
    group = summarize(two_misses, TARGET)["groups"][0]
    assert (group["runs"], group["reached"], group["valid"]) == (4, 2, False)
    assert group["invalid_reason"] == "2 of 4 runs did not reach the target; MLPerf allows 1"
    assert group["time_to_target"]["olympic_mean"] is None


def test_pending_runs_make_a_group_not_valid_yet():
    group = summarize([run(1, 2, 10.0), run(2, 2, None, state="QUEUED")], TARGET)["groups"][0]
    assert (group["runs"], group["pending"], group["valid"]) == (1, 1, False)
    assert group["invalid_reason"] == "1 run not finished yet"


def test_speedup_and_efficiency_against_the_one_worker_median():
    # 1 worker: 100, 120, 110 -> median 110. 2 workers: 55, 50, 60.
    # speed-ups 110/55 = 2.0, 110/50 = 2.2, 110/60 = 1.8333: median 2.0, mean 2.01111,
    # sd: deviations -0.01111, 0.18889, -0.17778 -> squares 0.000123, 0.035679, 0.031605,
    # sum 0.067407 / 2 = 0.033704 -> sd 0.183586; efficiency = speed-up / 2.
    results = [run(1, 1, 100.0), run(2, 1, 120.0), run(3, 1, 110.0)]
    results += [run(4, 2, 55.0), run(5, 2, 50.0), run(6, 2, 60.0)]
    out = summarize(results, TARGET)
    assert out["baseline"]["median_time_to_target"] == 110.0
    one, two = out["groups"]
    assert one["speedup"]["median"] == 1.0
    s, e = two["speedup"], two["efficiency"]
    assert s["median"] == pytest.approx(2.0)
    assert s["mean"] == pytest.approx(2.011111, rel=1e-6)
    assert s["sd"] == pytest.approx(0.183586, rel=1e-5)
    assert (s["min"], s["max"]) == (pytest.approx(110 / 60), pytest.approx(2.2))
    assert s["olympic_mean"] == pytest.approx(2.0)
    assert e["median"] == pytest.approx(1.0) and e["sd"] == pytest.approx(0.091793, rel=1e-5)
    assert two["speedup_of_medians"] == pytest.approx(2.0)


def test_no_speedup_without_a_one_worker_time():
    out = summarize([run(1, 1, None), run(2, 2, 50.0)], TARGET)
    assert out["baseline"]["median_time_to_target"] is None
    assert out["groups"][1]["speedup"] is None and out["groups"][1]["efficiency"] is None


def test_accuracy_throughput_and_comm_share_only_from_finished_runs():
    results = [
        run(1, 1, 10.0, accuracy_after_time=0.81, throughput=1000.0, communication_share=0.0),
        run(2, 1, 11.0, accuracy_after_time=0.83, throughput=1100.0, communication_share=0.1),
        run(3, 1, None, "FAILED", accuracy_after_time=0.20, throughput=50.0),
    ]
    group = summarize(results, TARGET)["groups"][0]
    assert group["accuracy_after_time"]["n"] == 2
    assert group["accuracy_after_time"]["mean"] == pytest.approx(0.82)
    assert group["images_per_second"]["median"] == 1050.0
    assert group["communication_share"]["max"] == 0.1


def test_band_is_min_median_max_of_each_runs_latest_accuracy():
    a = [(1.0, 0.5), (3.0, 0.7)]
    b = [(2.0, 0.6), (4.0, 0.9)]
    c = [(1.0, 0.4), (2.0, 0.8)]
    # t=1: a 0.5, c 0.4 (b not yet)  -> 0.4, 0.45, 0.5
    # t=2: a 0.5, b 0.6, c 0.8       -> 0.5, 0.6, 0.8
    # t=3: a 0.7, b 0.6, c 0.8       -> 0.6, 0.7, 0.8
    # t=4: a 0.7, b 0.9, c 0.8       -> 0.7, 0.8, 0.9
    assert band([a, b, c]) == [
        [1.0, 0.4, pytest.approx(0.45), 0.5],
        [2.0, 0.5, 0.6, 0.8],
        [3.0, 0.6, 0.7, 0.8],
        [4.0, 0.7, 0.8, 0.9],
    ]


def test_curves_and_bands_per_worker_count():
    results = [run(2, 2, 5.0, curve=((1.0, 0.5),)), run(1, 1, 9.0, curve=((2.0, 0.6),))]
    out = summarize(results, TARGET)
    assert [c["run"] for c in out["curves"]] == [1, 2]
    assert out["curves"][0]["points"] == [[2.0, 0.6]]
    assert [b["num_workers"] for b in out["bands"]] == [1, 2]
    assert [g["num_workers"] for g in out["groups"]] == [1, 2]
