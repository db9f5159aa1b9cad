"""A run's learning-rate schedule through POST /api/runs/ (run_rules/schedules.py): task 1b
takes step, cosine or poly (MLPerf's closed schedule), stored as given; every other task,
and any other value, is a 400 naming lr_schedule with the choices, storing nothing; a
resumed run keeps its parent's schedule and refuses another; a series carries it."""

import datetime as dt

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Metric, Run
from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.imagenet.task import LR_SCHEDULES

pytestmark = pytest.mark.django_db

R50 = {"name": "r50", "task": "resnet50-imagenet", "dataset": "synthetic", "num_workers": 2}


def test_the_worker_offers_exactly_the_schedules_the_catalogue_lists():
    """One list: the master accepts what the worker's --lr-schedule takes, default first."""
    info = catalogue.get("resnet50-imagenet")
    assert info.lr_schedules == LR_SCHEDULES == ("step", "cosine", "poly")
    from mlbench_worker.tasks import TASKS

    assert TASKS["resnet50-imagenet"].lr_schedule == info.lr_schedules[0]


@pytest.mark.parametrize(
    ("schedule", "stored"), [("poly", "poly"), ("cosine", "cosine"), ("step", "step"), ("", "step")]
)
def test_task_1b_takes_each_schedule_and_stores_what_it_trains_with(
    api, redis_settings, schedule, stored
):
    response = api.post("/api/runs/", {**R50, "lr_schedule": schedule}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["lr_schedule"] == stored == Run.objects.get(pk=body["id"]).lr_schedule
    assert body["manifest"]["setup"]["lr_schedule"] == stored
    assert api.get(f"/api/runs/{body['id']}/").json()["lr_schedule"] == stored


def test_left_out_it_is_the_tasks_default_and_the_defaults_say_so(api, redis_settings):
    body = api.post("/api/runs/", R50, format="json").json()
    assert body["lr_schedule"] == "step"  # stored as the schedule it trains with
    Run.objects.filter(pk=body["id"]).update(state=Run.CANCELLED)  # room for the next
    other = api.post("/api/runs/", {**R50, "task": "resnet20-cifar10"}, format="json").json()
    assert other["lr_schedule"] == ""  # a task without a choice of schedule
    served = api.get("/api/runs/defaults/").json()
    assert served["defaults"]["lr_schedule"] == "" == run_rules.DEFAULTS["lr_schedule"]
    assert served["tasks"]["resnet50-imagenet"]["lr_schedules"] == ["step", "cosine", "poly"]
    assert served["tasks"]["resnet20-cifar10"]["lr_schedules"] == []
    assert served["lr_schedules"]["resnet50-imagenet"] == ["step", "cosine", "poly"]
    assert "resnet20-cifar10" not in served["lr_schedules"]
    assert "lr_schedule" in run_rules.SETUP_FIELDS and "lr_schedule" in run_rules.INHERITED


@pytest.mark.parametrize(
    "fields, words",
    [
        ({**R50, "lr_schedule": "linear"}, ["'linear' is not one of", "step, cosine, poly"]),
        ({**R50, "lr_schedule": "POLY"}, ["'POLY' is not one of", "step, cosine, poly"]),
        ({"name": "a", "task": "resnet20-cifar10", "lr_schedule": "poly"},
         ["resnet20-cifar10 has no choice", "resnet50-imagenet (step, cosine, poly)"]),
        ({"name": "a", "task": "logreg-epsilon", "lr_schedule": "step"},
         ["logreg-epsilon has no choice", "leave it out"]),
        ({"name": "a", "task": "backend-benchmark", "lr_schedule": "poly"},
         ["trains nothing of ours", "leave it out"]),
        ({**R50, "custom_image_command": "echo hi", "lr_schedule": "poly"},
         ["trains nothing of ours"]),
    ],
)  # fmt: skip
def test_another_task_or_an_unknown_schedule_is_a_400_storing_nothing(
    api, staff_api, redis_settings, fields, words
):
    client = staff_api if "custom_image_command" in fields else api
    response = client.post("/api/runs/", fields, format="json")
    assert response.status_code == 400, response.json()
    message = " ".join(response.json()["errors"]["lr_schedule"])
    for word in words:
        assert word in message, message
    assert not Run.objects.exists()


def _cancelled_1b_run(make_run, schedule: str) -> Run:
    run = make_run(state=Run.CANCELLED, task="resnet50-imagenet", dataset="synthetic",
                   num_workers=2, lr_schedule=schedule, target="standard")  # fmt: skip
    identity = {"task": "resnet50-imagenet", "model": "resnet50", "num_workers": 2,
                "batch_size": 256, "seed": 42, "dataset": "synthetic"}  # fmt: skip
    Metric.objects.create(run=run, name=run_rules.CHECKPOINT_METRIC, value=1.0,
                          date=dt.datetime.now(dt.UTC),
                          metadata={"epoch": 1, "step": 5, "elapsed": 9.0,
                                    "identity": identity})  # fmt: skip
    return run


def test_a_resumed_run_keeps_its_parents_schedule(api, make_run, redis_settings):
    parent = _cancelled_1b_run(make_run, "poly")
    response = api.post("/api/runs/", {"name": "on", "resume_from": parent.pk}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["lr_schedule"] == "poly"
    again = {"name": "on", "resume_from": parent.pk, "lr_schedule": "poly", "queue": True}
    assert api.post("/api/runs/", again, format="json").status_code == 201


def test_a_resumed_run_with_another_schedule_is_refused(api, make_run, redis_settings):
    parent = _cancelled_1b_run(make_run, "poly")
    body = {"name": "on", "resume_from": parent.pk, "lr_schedule": "cosine"}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400, response.json()
    message = response.json()["errors"]["resume_from"][0]
    assert "lr_schedule 'poly'" in message and "'cosine'" in message
    assert Run.objects.count() == 1


def test_the_default_and_step_are_the_same_schedule_for_a_resume(api, make_run, redis_settings):
    parent = _cancelled_1b_run(make_run, "")
    body = {"name": "on", "resume_from": parent.pk, "lr_schedule": "step"}
    assert api.post("/api/runs/", body, format="json").status_code == 201
    body["lr_schedule"] = "poly"
    assert api.post("/api/runs/", body, format="json").status_code == 400


def test_a_series_carries_the_schedule_to_every_run(api, redis_settings):
    body = {**R50, "lr_schedule": "poly", "seeds": [1, 2], "time_budget": 5}
    del body["num_workers"]
    response = api.post("/api/series/", body, format="json")
    assert response.status_code == 201, response.json()
    series = response.json()
    assert series["settings"]["lr_schedule"] == "poly"
    assert [r.lr_schedule for r in Run.objects.order_by("pk")] == ["poly", "poly"]
    body["lr_schedule"] = "linear"
    refused = api.post("/api/series/", body, format="json")
    assert refused.status_code == 400 and "lr_schedule" in refused.json()["errors"]
    assert Run.objects.count() == 2


def test_the_form_offers_the_schedule_and_a_form_post_stores_it(redis_settings):
    from django.contrib.auth.models import User
    from django.test import Client

    from mlbench_master.dashboard.forms_spec import run_form_spec

    field = next(f for f in run_form_spec()["fields"] if f["name"] == "lr_schedule")
    assert field["widget"] == "select" and field["default"] == ""
    assert [v for v, _ in field["choices"]] == ["", "step", "cosine", "poly"]
    assert "resnet50-imagenet" in field["help"] and "MLPerf" in field["help"]
    client = Client()
    client.force_login(User.objects.create_user("dora"))
    page = client.get("/runs/").content.decode()
    assert 'name="lr_schedule"' in page and 'value="poly"' in page
    body = {**R50, "lr_schedule": "poly"}  # a form body, as the page's form sends it
    response = client.post("/api/runs/", body)
    assert response.status_code == 201, response.content
    assert Run.objects.get(pk=response.json()["id"]).lr_schedule == "poly"
    body.update(task="resnet20-cifar10", dataset="auto", queue="true")
    refused = client.post("/api/runs/", body)
    assert refused.status_code == 400 and "lr_schedule" in refused.json()["errors"]
    assert Run.objects.count() == 1


def test_the_workers_command_carries_the_stored_schedule(api, redis_settings):
    from mlbench_master.cluster.mpirun import worker_argv
    from mlbench_master.runs import lifecycle

    body = api.post("/api/runs/", {**R50, "lr_schedule": "poly"}, format="json").json()
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=body["id"])))
    assert argv[argv.index("--lr-schedule") + 1] == "poly"
