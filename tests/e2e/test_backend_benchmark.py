"""The backend benchmark through the whole stack: POST /api/runs/ with the task →
RQ job → mpirun with 2 ranks of `python -m mlbench_worker backend-benchmark` → metric points,
summary and output at the master. A short time budget bounds the sweep (1 KiB to 64 MiB by
default), which also shows that a budget ends the run FINISHED with what it measured."""

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_the_benchmark_runs_through_the_api(idle_master):
    master = idle_master
    run = master.create_run(name="comm", task="backend-benchmark", time_budget=6)
    assert run["backend"] == "mpi,gloo" and run["target"] == ""
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=240)
    assert done["state"] == "FINISHED", done["reason"]

    summary = done["summary"]
    assert summary["kind"] == "measurement" and summary["num_workers"] == 2
    assert summary["backends"] == ["mpi", "gloo"]
    measured = summary["results"]
    assert measured, summary["stop_reason"]
    assert {r["backend"] for r in measured} == {"mpi", "gloo"}
    assert {r["op"] for r in measured} == {"allreduce", "broadcast"}
    assert summary["measured"] + len(summary["not_measured"]) == 17 * 2 * 2

    metrics = master.get(
        f"/api/metrics/{run['id']}/",
        params={"metric_type": "run", "metric_filter": "busbw_mbps,latency_us,algbw_mbps"},
    ).json()
    for name in ("busbw_mbps", "latency_us", "algbw_mbps"):
        assert len(metrics.get(name, [])) == len(measured), name
    assert sorted(p["value"] for p in metrics["busbw_mbps"]) == sorted(
        r["busbw_median_mbps"] for r in measured
    )
    assert "mlbench result: backend-benchmark" in master.log_text(run["id"])
