"""Resuming a run, end to end: a reference run writes checkpoints, is cancelled, and a new
run started with `resume_from` continues from its last epoch to FINISHED.

Everything is the real thing except two conveniences: the master is Django's live test
server in this process (the API over real HTTP, the worker's metrics and summary over real
HTTP) and the run's job is `jobs.run_job` called in a thread instead of by an RQ worker;
the ranks are real (the local driver, one mpirun, 2 ranks of the reference worker).

Why not the embedded master of tests/e2e/live.py: a resumable run needs a checkpoint
written before the goal is reached, and on the full generated data set (50,000 images)
ResNet-20 passes even the paper's 91 % in its first epoch, so its first checkpoint is also
its last. The API has no option for a smaller training set (results must stay comparable),
so this test appends the worker's smoke-test size (`--train-images 2048`) to the command
the real builder makes; it can do that only in its own process. The smaller test set is
the run's own field (`test_examples`, which the child inherits).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests

from mlbench_master.cluster import mpirun
from tests.mllog_check import check_run_log

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

TINY = ["--train-images", "2048", "--log-every", "4"]  # the test set: test_examples=512


class InProcessMaster:
    """The live test server, as a client sees it."""

    def __init__(self, url: str, token: str, home: Path) -> None:
        self.url = url
        self.home = home
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def get(self, path: str, **params) -> dict:
        response = self.session.get(self.url + path, params=params, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def response(self, path: str, params: dict | None = None) -> requests.Response:
        return self.session.get(self.url + path, params=params, timeout=30)

    def post(self, path: str, body: dict) -> requests.Response:
        return self.session.post(self.url + path, json=body, timeout=30)

    def checkpoints(self, run_id: int) -> list[dict]:
        points = self.get(f"/api/metrics/{run_id}/", metric_type="run", metric_filter="checkpoint")
        return points.get("checkpoint", [])

    def log_text(self, run_id: int) -> str:
        page = self.get(f"/api/runs/{run_id}/logs/", limit=10000)
        return "".join(c["text"] for c in page["chunks"])


@pytest.fixture
def inprocess(live_server, settings, redis_settings, transactional_db, tmp_path, monkeypatch):
    from mlbench_master.accounts.users import issue_user_token

    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_LOCAL_WORKERS = 2
    settings.MLBENCH_MAX_WORKERS = 2
    settings.MLBENCH_MAX_CPUS = 1.0
    settings.MLBENCH_PUBLIC_READ = False
    settings.MLBENCH_PODS_REFRESH_SECONDS = 0
    settings.MLBENCH_MASTER_URL = live_server.url
    real = mpirun.worker_argv

    def tiny(run, python="python", hosts=None):
        argv = real(run, python=python, hosts=hosts)
        return argv if run.open_division else argv + TINY

    monkeypatch.setattr(mpirun, "worker_argv", tiny)
    return InProcessMaster(live_server.url, issue_user_token("e2e", create_user=True), tmp_path)


def start_job(run_id: int) -> tuple[threading.Thread, dict]:
    """The run's job, as an RQ worker would run it, in a thread of this process."""
    from django.db import connection

    from mlbench_master.runs.jobs import run_job

    result: dict = {}

    def work() -> None:
        try:
            result["state"] = run_job(run_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=work, name=f"run-job-{run_id}")
    thread.start()
    return thread, result


def finish(thread: threading.Thread, result: dict, timeout: float = 240) -> str:
    thread.join(timeout)
    assert not thread.is_alive(), "the run's job did not end"
    assert "error" not in result, result["error"]
    return result["state"]


def test_a_cancelled_run_resumes_from_its_last_checkpoint_and_finishes(inprocess, tmp_path):
    master = inprocess
    # The parent: a goal it cannot reach in a few epochs, so it is still training when
    # it is cancelled after its second checkpoint.
    created = master.post(
        "/api/runs/",
        {"name": "parent", "num_workers": 2, "num_cpus": 1, "dataset": "synthetic",
         "target": "paper", "max_epochs": 30, "test_examples": 512},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    parent = created.json()
    thread, result = start_job(parent["id"])
    deadline = time.monotonic() + 180
    while len(master.checkpoints(parent["id"])) < 2:
        assert time.monotonic() < deadline, "no second checkpoint was reported"
        assert thread.is_alive(), f"the parent ended early: {result}"
        time.sleep(0.25)
    cancelled = master.post(f"/runs/{parent['id']}/cancel/", {})
    assert cancelled.status_code == 200, cancelled.text
    assert finish(thread, result) == "CANCELLED"
    parent = master.get(f"/api/runs/{parent['id']}/")
    assert parent["state"] == "CANCELLED"
    last = master.checkpoints(parent["id"])[-1]["value"]
    assert last >= 2
    parent_file = Path(parent["job_metadata"]["checkpoint_dir"]) / "checkpoint.pt"
    assert parent_file.parent == master.home / "checkpoints" / f"run-{parent['id']}"
    kept = parent_file.read_bytes()  # the last checkpoint outlives the cancelled run

    # The child: the parent's settings (dataset "auto" is pinned to the checkpoint's) and
    # two more epochs than the checkpoint holds.
    created = master.post(
        "/api/runs/",
        {"name": "child", "num_workers": 2, "num_cpus": 1, "dataset": "auto",
         "target": "paper", "max_epochs": int(last) + 2, "resume_from": parent["id"]},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    child = created.json()
    assert child["resumed_from"] == parent["id"] and child["dataset"] == "synthetic"
    assert child["test_examples"] == 512  # the parent's test set, inherited
    resumed = child["manifest"]["resumed_from"]
    assert (resumed["run_id"], resumed["epoch"]) == (parent["id"], last)
    assert resumed["checkpoint"]["num_workers"] == 2

    thread, result = start_job(child["id"])
    assert finish(thread, result) == "FINISHED"
    child = master.get(f"/api/runs/{child['id']}/")
    assert child["state"] == "FINISHED" and child["exit_code"] == 0, child["reason"]
    argv = child["job_metadata"]["local"]["argv"]
    assert argv[argv.index("--resume-from") + 1] == str(parent_file.parent)
    # The worker says where it started, and it started where the manifest says.
    assert f"{int(last)} epochs done" in master.log_text(child["id"])
    summary = child["summary"]
    assert summary["epochs"] == last + 2 and summary["stop_reason"] == "max epochs done"
    # The benchmark clock went on from the checkpoint's reading.
    assert summary["elapsed"] > resumed["elapsed"] > 0
    epochs = master.get(f"/api/metrics/{child['id']}/", metric_type="run", metric_filter="epoch")
    assert min(p["value"] for p in epochs["epoch"]) > last  # no epoch trained twice
    # Its own checkpoints went to its own folder; the parent's was not overwritten, so the
    # parent can be resumed again.
    assert [p["value"] for p in master.checkpoints(child["id"])] == [last + 1, last + 2]
    assert (master.home / "checkpoints" / f"run-{child['id']}" / "checkpoint.pt").is_file()
    assert parent_file.read_bytes() == kept
    # The paper target out of reach: both MLPerf logs show every graded evaluation and stop
    # aborted at the last (the checker refuses them, as it must). The parent's grades are
    # those made before its cancel: an evaluation whose predictions were still in flight
    # then is not graded after its end (runs/frozen.py); the child finished, all graded.
    for run_id, least in ((parent["id"], 1), (child["id"], 2)):
        logged = check_run_log(master.response, run_id, tmp_path / "mllog")
        assert len(logged["evaluations"]) >= least and logged["time_to_target"] is None


def test_the_embedded_master_gives_a_reference_run_its_budget_and_checkpoint_folder(
    idle_master, tmp_path
):
    """The same path through the real embedded master (RQ worker, full-size generated
    data): a run with a 3-second budget stops by it, evaluates and ends FINISHED; its ranks
    were told where to checkpoint; a FINISHED run cannot be resumed."""
    master = idle_master
    run = master.create_run(name="budget", dataset="synthetic", time_budget=3)
    assert run["effective_time_budget"] == 3 and run["time_limit"] == 3 + 900
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=240)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["summary"]["stop_reason"] == "time budget spent"
    assert done["summary"]["final_val_accuracy"] is not None
    # One evaluation (the final model's), the target not reached: logged, aborted.
    logged = check_run_log(master.get, run["id"], tmp_path)
    assert len(logged["evaluations"]) == 1 and logged["time_to_target"] is None
    # Its accuracy after time is that evaluation's: the model as the budget's end left it,
    # evaluated after it (so the clock then reads past 3 s). `mlbench report` says so.
    ((clock, accuracy),) = logged["evaluations"]
    assert done["evaluation"]["accuracy_after_time"] == accuracy and clock > 3
    report = master.cli("report", str(run["id"])).stdout
    assert f"{100 * accuracy:.1f}% @ 3s budget" in report, report
    assert (
        f"run {run['id']}: accuracy after time is the accuracy of the model at the end of its "
        "3s time budget (evaluated once training stopped; the clock read"
    ) in report, report
    argv = done["job_metadata"]["local"]["argv"]
    folder = master.home / "checkpoints" / f"run-{run['id']}"
    assert argv[argv.index("--checkpoint-dir") + 1] == str(folder)
    assert argv[argv.index("--time-budget") + 1] == "3"
    refused = master.post(
        "/api/runs/", {"name": "again", "num_workers": 2, "resume_from": run["id"]}
    )
    assert refused.status_code == 400
    assert "is FINISHED" in refused.json()["errors"]["resume_from"][0]
