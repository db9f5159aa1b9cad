"""`mlbench run --resume-from RUN` and `ApiClient.create_run(resume_from=...)` against a
live master.

The parent here is a real run of task 1a, cancelled at once; the checkpoint record that its
rank 0 would post after an epoch is posted by the test (as the staff user the embedded
master configures), so these tests need no minutes of training. The resumed run's worker
then looks for the checkpoint file, finds none, and says so: the run fails with that
reason, which is what a user sees when a checkpoint has gone. Training through a real
checkpoint is tests/e2e/test_resume.py.
"""

import pytest

from mlbench_worker.client.api import ApiClient
from mlbench_worker.client.cli.master import EXIT_USAGE
from tests.checkpoints import IDENTITY

pytestmark = pytest.mark.mpi


def _no_active_run(master):
    for run in master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            master.delete(f"/api/runs/{run['id']}/")


@pytest.fixture
def parent(master):
    """A CANCELLED run of task 1a with 2 workers and a reported checkpoint at epoch 3."""
    _no_active_run(master)
    run = master.create_run(name="to resume", dataset="synthetic", num_workers=2)
    response = master.post(f"/runs/{run['id']}/cancel/", {})
    assert response.status_code == 200, response.text
    point = {
        "run_id": run["id"],
        "name": "checkpoint",
        "value": 3,
        "metadata": {"epoch": 3, "step": 588, "elapsed": 200.5, "identity": IDENTITY},
    }
    assert master.post("/api/metrics/", point).status_code == 201
    return master.run(run["id"])


def test_run_resume_from_creates_a_run_that_says_where_it_started(master, parent):
    done = master.cli(
        "run", "resumed", "--workers", "2", "--resume-from", str(parent["id"]),
        "--max-epochs", "5",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resumed from run {parent['id']}'s checkpoint at epoch 3 (step 588" in done.stdout
    child_id = int(done.stdout.split()[1])
    child = master.run(child_id)
    assert child["resumed_from"] == parent["id"] and child["dataset"] == "synthetic"
    assert child["manifest"]["resumed_from"]["epoch"] == 3

    show = master.cli("show", str(child_id))
    assert show.returncode == 0, show.stderr
    assert "resumed_from" in show.stdout and f"run {parent['id']}'s checkpoint" in show.stdout
    report = master.cli("report", str(parent["id"]), str(child_id))
    assert report.returncode == 0, report.stderr
    assert (
        f"run {child_id} was resumed from run {parent['id']}'s checkpoint at epoch 3"
        in report.stdout
    )

    # The record says there is a checkpoint, the file is not there: the worker refuses to
    # start from nothing, and the run fails saying so.
    failed = master.wait_state(child_id, ("FINISHED", "FAILED", "CANCELLED"), timeout=120)
    assert failed["state"] == "FAILED"
    assert "no checkpoint.pt there" in failed["reason"], failed["reason"]


def test_run_resume_from_a_run_it_cannot_continue_is_a_usage_error(master, parent):
    missing = master.cli("run", "x", "--workers", "2", "--resume-from", "987654")
    assert missing.returncode == EXIT_USAGE
    assert "resume_from" in missing.stderr and "there is no run 987654" in missing.stderr

    other_setup = master.cli("run", "x", "--workers", "1", "--resume-from", str(parent["id"]))
    assert other_setup.returncode == EXIT_USAGE
    assert "num_workers 2" in other_setup.stderr

    not_a_number = master.cli("run", "x", "--workers", "2", "--resume-from", "last")
    assert not_a_number.returncode == EXIT_USAGE
    assert "--resume-from" in not_a_number.stderr


def test_api_client_create_run_takes_resume_from(master, parent):
    client = ApiClient(url=master.url, in_cluster=False, token=master.token)
    response = client.create_run("via client", 2, num_cpus=1, resume_from=parent["id"]).result()
    assert response.status_code == 201, response.text
    child = response.json()
    assert child["resumed_from"] == parent["id"]
    assert master.delete(f"/api/runs/{child['id']}/").status_code == 204
    # A run that cannot be continued: the client gets the master's 400 naming the field.
    refused = client.create_run("again", 2, resume_from=987654).result()
    assert refused.status_code == 400
    assert "resume_from" in refused.json()["errors"]
