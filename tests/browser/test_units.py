"""Dashboard pieces without a browser: the New run form spec, one-time sign-in tokens."""

from mlbench_master.api.serializers import RunCreateSerializer
from mlbench_master.dashboard.forms_spec import run_form_spec


def test_form_has_every_api_option():
    form_fields = {f["name"] for f in run_form_spec()["fields"]}
    assert form_fields == set(RunCreateSerializer().fields)


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
