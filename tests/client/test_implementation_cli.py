"""`mlbench run --implementation NAME` and ApiClient(implementation=...) against a live
master: the run records it, `mlbench show` says it, a refusal is the master's (exit 2)."""

import pytest

from mlbench_worker.client.cli.master import EXIT_USAGE

from .test_algorithm_cli import _no_active_run

pytestmark = pytest.mark.mpi


def test_the_implementation_reaches_the_run_and_show_says_it(master):
    _no_active_run(master)
    done = master.cli(
        "run", "ddp", "--workers", "2", "--cpus", "1", "--implementation", "torch-ddp"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = int(done.stdout.split()[1])
    try:
        run = master.run(run_id)
        assert (run["implementation"], run["backend"]) == ("torch-ddp", "gloo")
        show = master.cli("show", str(run_id))
        assert "torch-ddp" in show.stdout
    finally:
        master.delete(f"/api/runs/{run_id}/")


def test_an_unknown_implementation_is_a_usage_error_listing_the_tasks(master):
    _no_active_run(master)
    before = len(master.get("/api/runs/").json())
    done = master.cli("run", "refused", "--workers", "2", "--implementation", "jax")
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert "implementation 'jax' is not known" in done.stderr
    assert "reference, torch-ddp, tensorflow" in done.stderr
    assert len(master.get("/api/runs/").json()) == before


def test_the_client_sends_the_implementation(master):
    from mlbench_worker.client.api import ApiClient

    _no_active_run(master)
    client = ApiClient(url=master.url, in_cluster=False, token=master.token)
    try:
        response = client.create_run("ddp", 2, implementation="torch-ddp").result()
        assert response.status_code == 201, response.text
        run = response.json()
        assert run["implementation"] == "torch-ddp"
        master.delete(f"/api/runs/{run['id']}/")
        # The original client's DDP image name chooses torch-ddp by itself.
        seed = client.create_run("ddp-image", 2, image="PyTorch Cifar-10 ResNet-20 (DDP)").result()
        assert seed.status_code == 201, seed.text
        assert seed.json()["implementation"] == "torch-ddp"
        master.delete(f"/api/runs/{seed.json()['id']}/")
    finally:
        client.close()
