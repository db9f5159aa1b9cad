"""The "New run" form offers every option POST /api/runs/ takes, with the settings' limits."""

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
