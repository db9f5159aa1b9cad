"""Task 1b through the master: the API accepts it with its own goals and data sets, the
dashboard's form offers it, and the run's workers get the right command."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mlbench_master.api.models import Run
from mlbench_master.cluster import mpirun
from mlbench_master.runs import lifecycle

pytestmark = pytest.mark.django_db

DEPTHS = ("resnet18-imagenet", "resnet34-imagenet", "resnet50-imagenet", "resnet101-imagenet")


@pytest.mark.parametrize("dataset", ["imagenet", "synthetic", "auto"])
def test_resnet50_imagenet_is_accepted_with_each_of_its_data_sets(api, redis_settings, dataset):
    body = {"name": "r", "num_workers": 2, "task": "resnet50-imagenet", "dataset": dataset}
    r = api.post("/api/runs/", body, format="json")
    assert r.status_code == 201, r.json()
    run = Run.objects.get(pk=r.json()["id"])
    assert (run.task, run.dataset, run.target) == ("resnet50-imagenet", dataset, "standard")
    argv = mpirun.worker_argv(lifecycle.run_spec(run, checkpoints=lambda i: f"/ckpt/run-{i}"))
    assert argv[3] == "resnet50-imagenet"
    assert argv[argv.index("--dataset") + 1] == dataset
    # The catalogue's accuracy-after-time budget applies, as for every reference task, and
    # the run gets a checkpoint folder to be resumed from.
    assert argv[argv.index("--time-budget") + 1] == "7200"
    assert argv[argv.index("--checkpoint-dir") + 1] == f"/ckpt/run-{run.pk}"


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"dataset": "cifar10"}, "dataset", "runs on auto, imagenet, synthetic, not 'cifar10'"),
        ({"dataset": "epsilon"}, "dataset", "runs on auto, imagenet, synthetic"),
        ({"target": "paper"}, "target", "its goals: light, standard"),
    ],
)
def test_goals_and_data_sets_of_other_tasks_are_refused(api, change, field, words):
    body = {"name": "r", "num_workers": 2, "task": "resnet50-imagenet", **change}
    r = api.post("/api/runs/", body, format="json")
    assert r.status_code == 400, r.json()
    assert words in " ".join(r.json()["errors"][field]), r.json()
    assert Run.objects.count() == 0


def test_imagenet_is_refused_for_a_cifar_task(api):
    r = api.post(
        "/api/runs/", {"name": "r", "num_workers": 1, "dataset": "imagenet"}, format="json"
    )
    assert r.status_code == 400
    assert "task resnet20-cifar10 runs on auto, cifar10, synthetic, not 'imagenet'" in " ".join(
        r.json()["errors"]["dataset"]
    )


def test_the_dashboard_offers_every_depth_with_its_goals(redis_settings):
    client = Client()
    client.force_login(User.objects.create_user("carol"))
    page = client.get("/runs/").content.decode()
    for task in DEPTHS:
        assert f'value="{task}"' in page, task
    embedded = re.search(
        r'<script id="task-catalogue" type="application/json">(.*?)</script>', page, re.S
    )
    assert embedded, "the page embeds the task catalogue"
    tasks = json.loads(embedded.group(1))
    info = tasks["resnet50-imagenet"]
    assert info["dataset"] == "imagenet" and info["throughput_unit"] == "images/s"
    assert info["goals"]["standard"]["value"] == 0.759 and info["goals"]["light"]["value"] == 0.5
    # The form posts to the API with the session; the run is created as through the API.
    r = client.post(
        "/api/runs/",
        {"name": "from the form", "num_workers": 1, "task": "resnet18-imagenet",
         "dataset": "synthetic", "target": "light"},
        content_type="application/json",
    )  # fmt: skip
    assert r.status_code == 201, r.content
    assert Run.objects.get(pk=r.json()["id"]).task == "resnet18-imagenet"
