"""The backend benchmark under real `mpirun -n 2`: mpi and gloo on small sizes, the
metric points and summary it writes, its time budget, and what it refuses."""

import json

import pytest

from mlbench_worker.backend_benchmark import sizes

from .helpers import mpirun, run_worker

pytestmark = pytest.mark.mpi

KiB = 2**10
SMALL = ["--min-size", "1KiB", "--max-size", "64KiB", "--size-factor", "4", "--repeats", "4"]


def _records(path):
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    points = [r for r in lines if r["type"] == "metric"]
    summaries = [r for r in lines if r["type"] == "summary"]
    assert len(summaries) == 1
    return points, summaries[0]


def test_two_ranks_measure_mpi_and_gloo(tmp_path):
    out = tmp_path / "comm.jsonl"
    proc = mpirun(
        2,
        ["-m", "mlbench_worker", "backend-benchmark", *SMALL, "--metrics-file", str(out),
         "--backend", "mpi,gloo", "--device", "cpu", "--target", "standard"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    points, summary = _records(out)

    wanted = sizes.size_list(KiB, 64 * KiB, 4)
    cells = {
        (op, b, s) for op in ("allreduce", "broadcast") for b in ("mpi", "gloo") for s in wanted
    }
    assert summary["stop_reason"] == "sweep complete" and summary["not_measured"] == []
    assert {(r["op"], r["backend"], r["size"]) for r in summary["results"]} == cells
    for row in summary["results"]:
        assert row["repeats"] == 4 and row["workers"] == 2 and row["warmup"] >= 1
        assert 0 < row["latency_best_us"] <= row["latency_median_us"]
        assert row["busbw_median_mbps"] <= row["busbw_best_mbps"]
        # two ranks: all-reduce's bus factor 2(n-1)/n is 1, so bus = algorithm bandwidth
        assert row["busbw_median_mbps"] == pytest.approx(row["algbw_median_mbps"])
    assert summary["busbw_mbps"] == max(r["busbw_median_mbps"] for r in summary["results"])
    assert summary["num_workers"] == 2 and summary["backend"] == "mpi,gloo"
    assert summary["versions"]["mpi"] and summary["hardware"]["cpu_count"]

    # three points per cell, posted by rank 0 only, each valued by the median repeat
    assert len(points) == 3 * len(cells)
    bus = {(p["metadata"]["op"], p["metadata"]["backend"], p["metadata"]["size"]): p
           for p in points if p["name"] == "busbw_mbps"}  # fmt: skip
    assert set(bus) == cells
    row = summary["results"][0]
    point = bus[(row["op"], row["backend"], row["size"])]
    assert point["value"] == row["busbw_median_mbps"]
    assert point["metadata"]["best"] == row["busbw_best_mbps"]

    # rank 0 prints the table once
    assert proc.stdout.count("mlbench result: backend-benchmark") == 1
    assert "highest bus bandwidth (median)" in proc.stdout


def test_a_time_budget_stops_the_sweep_and_keeps_what_was_measured(tmp_path):
    out = tmp_path / "comm.jsonl"
    proc = mpirun(
        2,
        ["-m", "mlbench_worker", "backend-benchmark", "--backend", "mpi", "--metrics-file",
         str(out), "--max-size", "64MiB", "--warmup", "1", "--repeats", "20",
         "--min-repeats", "20", "--time-budget", "0.5"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    points, summary = _records(out)
    assert summary["stop_reason"].startswith("time budget spent")
    measured = summary["results"]
    assert measured and summary["not_measured"]
    assert len(measured) + len(summary["not_measured"]) == 2 * 17
    assert len(points) == 3 * len(measured)


def test_one_rank_has_nothing_to_measure():
    proc = run_worker(["backend-benchmark", "--max-size", "4KiB"])
    assert proc.returncode == 2
    assert "at least 2 ranks" in proc.stderr


def test_bad_options_are_said_once_under_mpirun():
    proc = mpirun(2, ["-m", "mlbench_worker", "backend-benchmark", "--ops", "gather"], timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("gather is not an op") == 1
