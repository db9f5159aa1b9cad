"""/api/runs/: list, get, create (validation, limits, 409, Redis), delete."""

import pytest
import redis
from rq import Queue

from mlbench_master.api.models import Run

pytestmark = pytest.mark.django_db

SEED_FIELDS = {"id", "name", "created_at", "state", "job_id", "job_metadata"}


def test_list_and_get_seed_shape(api, make_run):
    a = make_run(name="Name of the run", state=Run.STARTED, job_metadata={"k": 1})
    b = make_run(name="Another run", state=Run.FINISHED)
    r = api.get("/api/runs/", HTTP_ACCEPT="application/json, text/javascript")
    assert r.status_code == 200
    body = r.json()
    assert [x["id"] for x in body] == [b.pk, a.pk]  # newest first
    assert SEED_FIELDS <= set(body[0])
    one = api.get(f"/api/runs/{a.pk}/").json()
    assert one["name"] == "Name of the run" and one["state"] == "STARTED"
    assert one["job_metadata"] == {"k": 1}
    assert one["created_at"].endswith("Z")
    assert "token_salt" not in one
    missing = api.get("/api/runs/999999/")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "run 999999 does not exist"}
    no_slash = api.get(f"/api/runs/{a.pk}")  # the original client's path: no redirect
    assert no_slash.status_code == 200 and no_slash.json() == one


def test_create_enqueues_one_job(api, redis_settings):
    body = {
        "name": "Name of the run",
        "num_workers": 2,
        "num_cpus": 1.0,
        "max_bandwidth": 1000,
        "image": None,
        "backend": None,
        "custom_image_name": None,
        "custom_image_command": None,
        "custom_backend": None,
        "run_all_nodes": False,
        "gpu_enabled": False,
        "light_target": True,
        "task": "resnet20-cifar10",
        "time_limit": 1200,
        "time_budget": 120,
        "max_epochs": 3,
        "dataset": "synthetic",
    }  # the seed client's create_run fields + ours
    r = api.post("/api/runs/", body, format="json")
    assert r.status_code == 201, r.json()
    run = r.json()
    assert SEED_FIELDS <= set(run)
    assert run["state"] == "INITIALIZED" and run["job_id"]
    assert run["target"] == "light" and run["backend"] == "mpi" and run["created_by"] == "alice"
    assert run["manifest"]["config"]["num_workers"] == 2
    queue = Queue("runs", connection=redis.Redis.from_url(redis_settings))
    assert queue.count == 1
    job = queue.jobs[0]
    assert job.id == run["job_id"]
    assert job.func_name == "mlbench_master.runs.jobs.run_job" and job.args == (run["id"],)
    assert job.timeout == 1200 + 900

    # a second run while this one is active: 409, nothing stored or enqueued
    r = api.post("/api/runs/", {"name": "second", "num_workers": 1}, format="json")
    assert r.status_code == 409
    assert f"run {run['id']}" in r.json()["detail"]
    assert Run.objects.count() == 1 and queue.count == 1


def test_create_when_redis_is_down(api, settings):
    settings.RQ_QUEUES = {"runs": {"URL": "redis://127.0.0.1:1/0"}}
    r = api.post("/api/runs/", {"name": "lost?", "num_workers": 1}, format="json")
    assert r.status_code == 503
    assert "Redis" in r.json()["detail"] and "FAILED" in r.json()["detail"]
    run = Run.objects.get()
    assert run.state == Run.FAILED and "unreachable" in run.reason and run.finished_at


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"num_workers": 0}, "num_workers", "between 1 and 4 (limit MLBENCH_MAX_WORKERS)"),
        ({"num_workers": 5}, "num_workers", "MLBENCH_MAX_WORKERS"),
        ({"num_workers": "two"}, "num_workers", "integer"),
        ({"num_cpus": 2.5}, "num_cpus", "MLBENCH_MAX_CPUS"),
        ({"num_cpus": 0}, "num_cpus", "more than 0"),
        ({"max_bandwidth": 1001}, "max_bandwidth", "MLBENCH_MAX_BANDWIDTH"),
        ({"gpu_enabled": True}, "gpu_enabled", "MLBENCH_MAX_GPUS"),
        ({"backend": "carrier-pigeon"}, "backend", "mpi, gloo, nccl"),
        ({"backend": "nccl"}, "backend", "GPUs"),
        ({"task": "mnist-magic"}, "task", "known tasks"),
        ({"target": "best"}, "target", "light, standard, paper"),
        ({"dataset": "imagenet"}, "dataset", "auto, cifar10, synthetic"),
        ({"time_limit": 0}, "time_limit", "MLBENCH_MAX_TIME_LIMIT"),
        ({"time_budget": -1}, "time_budget", "positive"),
        ({"time_budget": 100, "time_limit": 50}, "time_limit", "at least time_budget 100 s"),
        ({"max_epochs": 0}, "max_epochs", "between 1"),
        ({"num_worker": 2}, "num_worker", "unknown field"),
        ({"name": ""}, "name", "blank"),
        ({"name": None}, "name", "null"),
    ],
)
def test_create_validation(api, change, field, words):
    r = api.post("/api/runs/", {"name": "r", "num_workers": 2, **change}, format="json")
    assert r.status_code == 400, r.json()
    body = r.json()
    assert field in body["errors"] and words in " ".join(body["errors"][field]), body
    assert f"{field}: {body['errors'][field][0]}" in body["detail"], body  # the sentence names it
    assert Run.objects.count() == 0


def test_missing_required_fields(api):
    r = api.post("/api/runs/", {}, format="json")
    assert r.status_code == 400
    # Only the name: every other field has a default (GET /api/runs/defaults/).
    assert set(r.json()["errors"]) == {"name"}


def test_custom_command_is_staff_only(api):
    body = {"name": "r", "num_workers": 1, "custom_image_command": "rm -rf /"}
    r = api.post("/api/runs/", body, format="json")
    assert r.status_code == 403 and "staff" in r.json()["detail"]
    assert set(r.json()) == {"detail"} and Run.objects.count() == 0


def test_delete_finished_run_removes_its_metrics_not_pod_metrics(api, make_run):
    from mlbench_master.api.models import Metric

    run = make_run()
    Metric.objects.create(run=run, name="loss", value=1)
    Metric.objects.create(pod_name="w-0", name="cpu_cores", value=1, metadata={"run_id": run.pk})
    assert api.delete(f"/api/runs/{run.pk}/").status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists()
    assert list(Metric.objects.values_list("pod_name", flat=True)) == ["w-0"]
    assert api.delete(f"/api/runs/{run.pk}/").status_code == 404


def test_delete_active_run_cancels_it_first(api, redis_settings):
    r = api.post("/api/runs/", {"name": "r", "num_workers": 1}, format="json")
    run_id, job_id = r.json()["id"], r.json()["job_id"]
    conn = redis.Redis.from_url(redis_settings)
    assert api.delete(f"/api/runs/{run_id}/").status_code == 204
    assert not Run.objects.filter(pk=run_id).exists()
    from rq.job import Job

    assert Job.fetch(job_id, connection=conn).get_status() == "canceled"
    # a new run may start now
    assert (
        api.post("/api/runs/", {"name": "next", "num_workers": 1}, format="json").status_code == 201
    )


@pytest.fixture
def epsilon_like_task(monkeypatch, settings):
    """A second kind of task in the catalogue: its own data set and only two goals."""
    import dataclasses

    from mlbench_worker.shared import catalogue

    base = catalogue.TASKS["resnet20-cifar10"]
    goals = {k: base.goals[k] for k in ("light", "standard")}
    other = dataclasses.replace(base, name="logreg-epsilon", dataset="epsilon", goals=goals)
    monkeypatch.setitem(catalogue.TASKS, other.name, other)
    settings.MLBENCH_TASKS = [*settings.MLBENCH_TASKS, other.name]
    return other


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"task": "logreg-epsilon", "dataset": "cifar10"}, "dataset", "auto, epsilon, synthetic"),
        ({"task": "logreg-epsilon", "target": "paper"}, "target", "its goals: light, standard"),
        ({"dataset": "epsilon"}, "dataset", "task resnet20-cifar10 runs on auto, cifar10"),
    ],
)
def test_goals_and_data_sets_are_the_tasks_own(api, epsilon_like_task, change, field, words):
    r = api.post("/api/runs/", {"name": "r", "num_workers": 2, **change}, format="json")
    assert r.status_code == 400, r.json()
    assert words in " ".join(r.json()["errors"][field]), r.json()
    assert Run.objects.count() == 0
