"""The flink implementation through the whole stack on the local driver: POST /api/runs/ →
the job's mpirun, whose ranks run Flink's own Python (MLBENCH_FLINK_PYTHON) → a Flink
standalone cluster of the ranks and one streaming job → metrics, predictions and summary
posted back. A killed rank fails the run with that rank as the first cause, a cancel ends
one as CANCELLED, and afterwards no process of the run is left: no rank, no JVM, no Python
worker, each found by the run's own Flink folders (named after the run) in its command
line or environment, never by a name other tests share. The finished run through a master
is the Slurm suite's (tests/slurm/test_runs.py) and the worker suite's.

Two runs, each starting a real cluster (tens of seconds here). No wall-clock bound is
asserted: the waits are long enough for a loaded machine.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest

from tests.worker.helpers import FLINK_PYTHON, have_flink

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.slow,
    pytest.mark.skipif(
        not have_flink() and not os.environ.get("CI"),
        reason=f"no pyflink in {FLINK_PYTHON} or no java: make test-deps",
    ),
]
ENDED = ("FINISHED", "FAILED", "CANCELLED")


def _start(master) -> dict:
    return master.create_run(
        name="flink", task="logreg-epsilon", dataset="synthetic", implementation="flink",
        time_budget=600, target="standard", train_examples=8000, test_examples=2000,
    )  # fmt: skip


def _training(master, run_id: int, timeout: float = 400) -> None:
    """Until rank 0 has posted a training point and both ranks run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = master.run(run_id)
        assert state["state"] in ("STARTED", "INITIALIZED"), (
            state,
            master.log_text(run_id)[-3000:],
        )
        points = master.get(
            f"/api/metrics/{run_id}/", params={"metric_type": "run", "metric_filter": "train_loss"}
        ).json()
        if points.get("train_loss") and len(master.ranks(run_id)) == 2:
            return
        time.sleep(1)
    pytest.fail(f"run {run_id} did not start training: {master.log_text(run_id)[-3000:]}")


def _left(master, run_id: int) -> list:
    """The run's ranks still alive, and every process that names one of its Flink folders."""
    marker = f"mlbench-flink-{run_id}-"
    left = [p for p in master.rank_processes(run_id) if p.status() != psutil.STATUS_ZOMBIE]
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(proc.cmdline()) + " ".join(
                f"{k}={v}" for k, v in proc.environ().items()
            )
        except psutil.Error:
            continue
        if marker in text and proc not in left:
            left.append(proc)
    return left


def _nothing_left(master, run_id: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _left(master, run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _left(master, run_id) == []


@pytest.mark.timeout(1500)  # two clusters
def test_a_killed_rank_and_a_cancel_end_flink_runs_leaving_nothing(idle_master):
    master = idle_master
    run = _start(master)
    _training(master, run["id"])
    assert "implementation flink (Flink 2." in master.log_text(run["id"])
    master.ranks(run["id"])[1].kill()
    done = master.wait_state(run["id"], ENDED, timeout=120)
    assert done["state"] == "FAILED" and "rank 1 exited with code 137" in done["reason"], done
    _nothing_left(master, run["id"])

    run = _start(master)
    _training(master, run["id"])
    response = master.post(f"/runs/{run['id']}/cancel/", {})  # the dashboard's Cancel
    assert response.status_code == 200, response.text
    done = master.wait_state(run["id"], ENDED, timeout=120)
    assert done["state"] == "CANCELLED", done
    _nothing_left(master, run["id"])
