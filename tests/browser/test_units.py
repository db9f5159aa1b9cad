"""Dashboard pieces without a browser: the New run form spec, one-time sign-in tokens."""

from pathlib import Path

from mlbench_master.api.serializers import RunCreateSerializer
from mlbench_master.dashboard.forms_spec import run_form_spec

RUNS_PAGE = (
    Path(__file__).resolve().parents[2] / "mlbench_master/dashboard/templates/dashboard/runs.html"
)


def test_form_has_every_api_option():
    # An algorithm's options are fields of their own (algorithm_options.<algorithm>.<option>).
    form_fields = {f["name"].split(".")[0] for f in run_form_spec()["fields"]}
    # image_name is the original client's name for `image`, which the form has. A run's
    # `seed` is the form's Seeds field with one value (several, or Repeats, or several
    # Worker counts make a series: runs.js `target`), so the form has POST /api/series/'s
    # seeds, repeats and workers in its place.
    series_fields = {"seeds", "repeats", "workers"}
    # algorithm_source is a staff-only file input the page itself holds (runs.html): the
    # file is uploaded first and the run names it by the hash the upload answers.
    page_fields = {"algorithm_source"}
    assert 'data-field="algorithm_source"' in RUNS_PAGE.read_text()
    assert form_fields - series_fields == (
        set(RunCreateSerializer().fields) - {"image_name", "seed"} - page_fields
    )
    assert series_fields <= form_fields


def test_limits_come_from_settings(settings):
    settings.MLBENCH_MAX_WORKERS = 5
    settings.MLBENCH_MAX_CPUS = 1.5
    settings.MLBENCH_MAX_BANDWIDTH = 100
    settings.MLBENCH_TASKS = ["resnet20-cifar10", "resnet56-cifar10"]
    fields = {f["name"]: f for f in run_form_spec()["fields"]}
    assert fields["num_workers"]["max"] == 5
    assert fields["num_cpus"]["max"] == 1.5
    assert fields["max_bandwidth"]["max"] == fields["max_bandwidth"]["default"] == 100
    assert [v for v, _ in fields["task"]["choices"]] == settings.MLBENCH_TASKS
    assert fields["gpu_enabled"]["disabled"]  # MLBENCH_MAX_GPUS=0


def test_one_time_token_is_single_use_and_unforgeable(db, monkeypatch):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from mlbench_master.dashboard import links

    url = links.one_time_login_url("carol", "http://master:8000/")
    assert url.startswith("http://master:8000/login/once/")
    token = url.rstrip("/").rsplit("/", 1)[1]
    user = links.user_for_token(token)
    assert user is not None and user.get_username() == "carol"
    assert not user.has_usable_password() and not user.is_staff
    assert links.user_for_token(token[:-2] + "xx") is None  # forged
    monkeypatch.setattr(links, "MAX_AGE", -1)
    assert links.user_for_token(token) is None  # expired
    monkeypatch.setattr(links, "MAX_AGE", 3600)
    get_user_model().objects.filter(pk=user.pk).update(last_login=timezone.now())
    assert links.user_for_token(token) is None  # used: signing in moved last_login


def test_open_division_fields_follow_the_cluster(settings):
    settings.MLBENCH_CLUSTER = "local"
    spec = run_form_spec()
    fields = {f["name"]: f for f in spec["fields"]}
    assert spec["cluster"] == "local"
    image = fields["custom_image_name"]
    assert image["disabled"] and "Not available on this cluster (local)" in image["help"]
    command = fields["custom_image_command"]
    assert not command["disabled"] and "on this machine" in command["help"]

    settings.MLBENCH_CLUSTER = "kubernetes"
    spec = run_form_spec()
    fields = {f["name"]: f for f in spec["fields"]}
    assert spec["cluster"] == "kubernetes"
    assert not fields["custom_image_name"]["disabled"]
    assert "worker pods run this image" in fields["custom_image_name"]["help"]
    assert "in the worker pods" in fields["custom_image_command"]["help"]

    settings.MLBENCH_CLUSTER = "slurm"
    spec = run_form_spec()
    fields = {f["name"]: f for f in spec["fields"]}
    assert spec["cluster"] == "slurm"
    image = fields["custom_image_name"]
    assert image["disabled"] and "Not available on this cluster (Slurm)" in image["help"]
    assert "in the run's Slurm job" in fields["custom_image_command"]["help"]


def test_pages_embed_the_task_catalogue(client, django_user_model, settings):
    """Every task of the catalogue, MLBENCH_TASKS or not: old runs of a task no longer
    offered still need their unit."""
    import json
    import re

    from mlbench_master.dashboard.tasks import task_catalogue
    from mlbench_worker.shared import catalogue

    settings.MLBENCH_TASKS = ["resnet20-cifar10"]
    embedded = task_catalogue()
    assert set(embedded) == set(catalogue.TASKS)
    assert embedded["logreg-epsilon"]["throughput_metric"] == "samples_per_sec"
    assert embedded["logreg-epsilon"]["throughput_unit"] == "samples/s"
    assert embedded["resnet20-cifar10"]["throughput_unit"] == "images/s"
    assert embedded["logreg-epsilon"]["goals"]["standard"] == {
        "metric": "val_accuracy",
        "value": 0.89,
        "direction": "up",
    }
    client.force_login(django_user_model.objects.create_user("bob"))
    for path in ("/runs/", "/runs/1/", "/compare/"):
        html = client.get(path).content.decode()
        found = re.search(
            r'<script id="task-catalogue" type="application/json">(.*?)</script>', html
        )
        assert found, path
        assert json.loads(found.group(1)) == embedded
