"""POST /api/runs/<id>/summary/: the worker's end-of-run summary."""

import pytest

from mlbench_master.api.models import Run
from tests.api.conftest import worker_client
from tests.summaries import summary_body

pytestmark = pytest.mark.django_db

SUMMARY = summary_body()


def test_worker_posts_summary(run):
    r = worker_client(run).post(f"/api/runs/{run.pk}/summary/", SUMMARY, format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["summary"] == SUMMARY and r.json()["dataset_used"] == "synthetic"
    stored = Run.objects.get(pk=run.pk)
    assert stored.summary["time_to_target"] == 42.5 and stored.dataset_used == "synthetic"
    assert stored.state == Run.STARTED  # a summary never changes the state


def test_staff_may_post_summary_too(staff_api, run):
    body = summary_body(dataset="cifar10")
    r = staff_api.post(f"/api/runs/{run.pk}/summary", body, format="json")
    assert r.status_code == 200 and r.json()["dataset_used"] == "cifar10"


@pytest.mark.parametrize("body", [[1, 2], "text", summary_body(dataset="x" * 40)])
def test_bad_summary(staff_api, run, body):
    r = staff_api.post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 400 and r.json()["detail"]
    assert Run.objects.get(pk=run.pk).summary == {}


def _without(field: str) -> dict:
    body = summary_body()
    del body[field]
    return body


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_without("time_to_target"), "time_to_target", "time_to_target is missing"),
        (_without("images_per_sec"), "images_per_sec", "images_per_sec is missing"),
        (summary_body(dataset=5), "dataset", "dataset must be a text, got 5"),
        (summary_body(reached="yes"), "reached", "reached must be a boolean, got 'yes'"),
        (summary_body(seed=1.5), "seed", "seed must be an integer, got 1.5"),
        (summary_body(epochs=True), "epochs", "epochs must be a number, got True"),
        (summary_body(elapsed=None), "elapsed", "elapsed must be a number, got None"),
        (summary_body(accuracy=0.99), "accuracy", "accuracy is not a field of the summary"),
        (summary_body(config={"peak_lr": "0.1"}), "config.peak_lr", "must be a number"),
    ],
)
def test_a_summary_that_does_not_fit_the_record_is_refused_naming_the_field(
    run, body, field, words
):
    r = worker_client(run).post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json()["errors"] and words in r.json()["errors"][field][0]
    assert field in r.json()["detail"]
    assert Run.objects.get(pk=run.pk).summary == {}  # nothing of it stored


def test_a_summary_is_held_to_its_tasks_record(staff_api, make_run):
    """Task 2 counts samples: its throughput field is samples_per_sec, not images_per_sec."""
    run = make_run(task="logreg-epsilon")
    body = summary_body("logreg-epsilon")
    assert "samples_per_sec" in body and "images_per_sec" not in body
    assert staff_api.post(f"/api/runs/{run.pk}/summary/", body, format="json").status_code == 200
    body["images_per_sec"] = body.pop("samples_per_sec")
    r = staff_api.post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 400 and "samples_per_sec" in r.json()["errors"]


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
