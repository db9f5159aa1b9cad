"""`mlbench run --lr-schedule poly` and ApiClient(lr_schedule=...) against a live master:
a task-1b run records it and `mlbench show` says it; for another task the refusal is the
master's 400 naming lr_schedule (exit 2); an unknown value is argparse's usage error."""

import pytest

from mlbench_worker.client.cli.master import EXIT_USAGE

from .test_algorithm_cli import _no_active_run

pytestmark = pytest.mark.mpi

R50 = ("--task", "resnet50-imagenet", "--dataset", "synthetic", "--workers", "1", "--cpus", "1")


def test_the_schedule_reaches_the_run_and_show_says_it(master):
    _no_active_run(master)
    done = master.cli("run", "closed", *R50, "--lr-schedule", "poly", "--time-limit", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = int(done.stdout.split()[1])
    try:
        assert master.run(run_id)["lr_schedule"] == "poly"
        show = master.cli("show", str(run_id))
        assert any(line.split()[:2] == ["lr_schedule", "poly"] for line in show.stdout.splitlines())
    finally:
        master.delete(f"/api/runs/{run_id}/")


def test_another_task_or_value_is_refused_and_nothing_is_stored(master):
    _no_active_run(master)
    before = len(master.get("/api/runs/").json())
    done = master.cli("run", "refused", "--workers", "1", "--lr-schedule", "poly")
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert "lr_schedule" in done.stderr and "resnet50-imagenet (step, cosine, poly)" in done.stderr
    done = master.cli("run", "refused", *R50, "--lr-schedule", "linear")
    assert done.returncode == EXIT_USAGE and "choose from 'step', 'cosine', 'poly'" in done.stderr
    assert len(master.get("/api/runs/").json()) == before


def test_the_client_sends_the_schedule(master):
    from mlbench_worker.client.api import ApiClient

    _no_active_run(master)
    client = ApiClient(url=master.url, in_cluster=False, token=master.token)
    try:
        response = client.create_run(
            "closed", 1, 1.0, task="resnet50-imagenet", dataset="synthetic", time_limit=120,
            lr_schedule="poly",
        ).result()  # fmt: skip
        assert response.status_code == 201, response.text
        assert response.json()["lr_schedule"] == "poly"
        master.delete(f"/api/runs/{response.json()['id']}/")
        refused = client.create_run("refused", 1, 1.0, lr_schedule="cosine").result()
        assert refused.status_code == 400 and "lr_schedule" in refused.json()["errors"]
    finally:
        client.close()
