"""A run with another algorithm through the whole stack: POST /api/runs/ with `algorithm`
and `algorithm_options` → the job's mpirun command → the worker's algorithm → the summary's
bytes per step and compression ratio, and the `comm_bytes` series."""

import pytest

from tests.mllog_check import check_run_log

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_a_compressed_run_finishes_and_reports_what_it_sent(idle_master, tmp_path):
    master = idle_master
    run = master.create_run(
        name="topk", task="logreg-epsilon", dataset="synthetic", target="light",
        algorithm="topk", algorithm_options={"density": 0.02}, max_epochs=5,
    )  # fmt: skip
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=300)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    assert (done["algorithm"], done["algorithm_options"]) == ("topk", {"density": 0.02})
    summary = done["summary"]
    assert (summary["algorithm"], summary["algorithm_options"]) == ("topk", {"density": 0.02})
    assert summary["reached"] and summary["comm_bytes_per_step"] > 0
    # 8 bytes (value and index) per entry sent, for 2 % of the entries: 1/0.02/2 = 25 times
    # less than 4 bytes for every entry, up to the rounding of k.
    assert 20 < summary["compression_ratio"] <= 25
    series = master.get(
        f"/api/metrics/{run['id']}/", params={"metric_type": "run", "metric_filter": "comm_bytes"}
    ).json()
    assert series.get("comm_bytes"), series
    assert done["manifest"]["config"]["algorithm_options"] == {"density": 0.02}
    # Reached at its first evaluation: its MLPerf log shows it and passes the checker.
    assert check_run_log(master.get, run["id"], tmp_path)["time_to_target"] is not None
