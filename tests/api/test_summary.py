"""POST /api/runs/<id>/summary/: the worker's end-of-run summary."""

import pytest

from mlbench_master.api.models import Run
from tests.api.conftest import worker_client

pytestmark = pytest.mark.django_db

SUMMARY = {
    "task": "resnet20-cifar10",
    "model": "resnet20",
    "dataset": "synthetic",
    "num_workers": 2,
    "backend": "mpi",
    "device": "cpu",
    "target": "light",
    "target_accuracy": 0.5,
    "reached": True,
    "time_to_target": 42.5,
    "final_val_accuracy": 0.61,
    "best_val_accuracy": 0.62,
    "epochs": 3,
    "images_per_sec": 812.0,
    "comm_share": 0.12,
    "elapsed": 60.1,
    "seed": 1,
    "versions": {"python": "3.11", "torch": "2.13.0", "mpi": "Open MPI 5", "mlbench": "0.2"},
    "hardware": {"cpu": "x"},
}


def test_worker_posts_summary(run):
    r = worker_client(run).post(f"/api/runs/{run.pk}/summary/", SUMMARY, format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["summary"] == SUMMARY and r.json()["dataset_used"] == "synthetic"
    stored = Run.objects.get(pk=run.pk)
    assert stored.summary["time_to_target"] == 42.5 and stored.dataset_used == "synthetic"
    assert stored.state == Run.STARTED  # a summary never changes the state


def test_staff_may_post_summary_too(staff_api, run):
    r = staff_api.post(f"/api/runs/{run.pk}/summary", {"dataset": "cifar10"}, format="json")
    assert r.status_code == 200 and r.json()["dataset_used"] == "cifar10"


@pytest.mark.parametrize("body", [[1, 2], "text", {"dataset": 5}, {"dataset": "x" * 40}])
def test_bad_summary(staff_api, run, body):
    r = staff_api.post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 400 and r.json()["detail"]


def test_unknown_run(staff_api):
    assert staff_api.post("/api/runs/999999/summary/", {}, format="json").status_code == 404


def test_anonymous(anon, run):
    assert anon.post(f"/api/runs/{run.pk}/summary/", {}, format="json").status_code == 401


@pytest.mark.parametrize(
    "framework, versions, recorded",
    [
        # The master could not tell (Kubernetes, Slurm): the workers' word is kept.
        ({"name": "pytorch", "version": None, "version_from": "worker summary"},
         {"torch": "2.3.1+cpu"}, "2.3.1+cpu"),
        ({"name": "tensorflow", "version": None, "version_from": "worker summary"},
         {"tensorflow": "2.16.1", "keras": "3.3.3"}, "2.16.1"),
        # Known at creation: the master's reading stays.
        ({"name": "pytorch", "version": "2.3.1", "version_from": "master"},
         {"torch": "9.9"}, "2.3.1"),
        # Nothing usable reported: still unknown, nothing invented.
        ({"name": "pytorch", "version": None, "version_from": "worker summary"},
         {"python": "3.11"}, None),
    ],
)  # fmt: skip
def test_the_summary_gives_the_manifest_the_framework_version_it_lacked(
    run, framework, versions, recorded
):
    Run.objects.filter(pk=run.pk).update(manifest={"seed": 1, "framework": framework})
    body = {**SUMMARY, "versions": versions}
    r = worker_client(run).post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 200, r.json()
    manifest = Run.objects.get(pk=run.pk).manifest
    assert manifest["framework"]["version"] == recorded and manifest["seed"] == 1
    assert manifest["framework"]["name"] == framework["name"]
