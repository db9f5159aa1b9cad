"""GET /api/runs/defaults/ and the one table behind it (mlbench_master/run_rules/): what a
run gets for every field it leaves out, the same whoever sends it.

The same benchmark started from the CLI, the client and the form is checked against the
API's in tests/client/test_same_run.py and tests/browser/test_form_defaults.py.
"""

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_worker.shared import catalogue

pytestmark = pytest.mark.django_db

# What a run stores from its request, defaults included (the fields the tests compare).
SETTINGS = (
    "task", "backend", "num_workers", "num_cpus", "max_bandwidth", "latency", "gpu_enabled",
    "light_target", "target", "time_budget", "effective_time_budget", "time_budget_source",
    "max_epochs", "dataset", "time_limit", "image", "custom_image_name",
    "custom_image_command", "custom_backend", "run_all_nodes", "algorithm", "algorithm_options",
    "implementation", "seed", "lr_schedule",
)  # fmt: skip


def settings_of(run: dict) -> dict:
    return {name: run[name] for name in SETTINGS}


def test_the_table_is_served_with_the_limits_and_each_tasks_times(api):
    body = api.get("/api/runs/defaults/").json()
    assert body["defaults"] == {**run_rules.DEFAULTS, "num_cpus": body["defaults"]["num_cpus"]}
    assert body["defaults"]["num_workers"] == 2 and body["defaults"]["max_bandwidth"] == 1000
    assert body["time_limit_margin"] == run_rules.TIME_LIMIT_MARGIN
    task = body["tasks"]["resnet20-cifar10"]
    assert task["time_budget"] == 7200 and task["time_limit"] == 7200 + run_rules.TIME_LIMIT_MARGIN
    assert task["target"] == "standard" and "light" in task["goals"]
    assert body["tasks"]["backend-benchmark"]["backend"] == "mpi,gloo"
    assert body["tasks"]["backend-benchmark"]["datasets"] == []


def test_numbers_above_the_operators_limits_are_lowered_to_them(api, settings):
    settings.MLBENCH_MAX_CPUS = 1.5
    settings.MLBENCH_MAX_WORKERS = 1
    settings.MLBENCH_MAX_BANDWIDTH = 100
    defaults = api.get("/api/runs/defaults/").json()["defaults"]
    assert (defaults["num_cpus"], defaults["num_workers"], defaults["max_bandwidth"]) == (
        1.5, 1, 100,
    )  # fmt: skip


def test_the_default_task_is_one_this_master_offers(api, settings):
    settings.MLBENCH_TASKS = ["logreg-epsilon"]
    body = api.get("/api/runs/defaults/").json()
    assert body["defaults"]["task"] == "logreg-epsilon" and list(body["tasks"]) == [
        "logreg-epsilon"
    ]


def test_a_run_without_options_stores_the_served_defaults(api, redis_settings):
    served = api.get("/api/runs/defaults/").json()
    response = api.post("/api/runs/", {"name": "plain"}, format="json")
    assert response.status_code == 201, response.json()
    run = response.json()
    for name, value in served["defaults"].items():
        if value is not None and name not in ("time_limit", "algorithm_options"):
            assert run[name] == value, name
    # {}: the algorithm's own defaults, which the table lists too
    algorithm = served["algorithms"][run["algorithm"]]
    assert run["algorithm_options"] == {o["name"]: o["default"] for o in algorithm["options"]}
    own = served["tasks"][run["task"]]
    assert (run["effective_time_budget"], run["time_limit"]) == (
        own["time_budget"], own["time_limit"],
    )  # fmt: skip
    assert run["time_budget_source"] == "task"
    assert run["manifest"]["setup"]["max_bandwidth"] == 1000


def test_the_models_defaults_follow_the_table():
    """Rows made in code (tests, the shell) get what the API would give them."""
    for name, value in run_rules.DEFAULTS.items():
        field = Run._meta.get_field(name)
        if value is not None:
            assert field.get_default() == value, name
    assert Run._meta.get_field("time_limit").get_default() == run_rules.default_time_limit(
        catalogue.SEED_TIME_BUDGET
    )


def test_the_defaults_need_no_token_when_reads_are_public_and_one_otherwise(anon, settings):
    settings.MLBENCH_PUBLIC_READ = False
    assert anon.get("/api/runs/defaults/").status_code == 401  # no token
    settings.MLBENCH_PUBLIC_READ = True
    assert anon.get("/api/runs/defaults/").status_code == 200


def test_the_default_number_of_workers_is_checked_against_the_cluster(api, settings):
    settings.MLBENCH_LOCAL_WORKERS = 1
    response = api.post("/api/runs/", {"name": "plain"}, format="json")
    assert response.status_code == 400
    assert "num_workers" in response.json()["errors"]


def test_a_stored_runs_budget_is_the_one_decided_at_its_creation(api, redis_settings):
    body = api.post("/api/runs/", {"name": "limited", "time_limit": 600}, format="json").json()
    run = Run.objects.get(pk=body["id"])
    Run.objects.filter(pk=run.pk).update(time_limit=20000)  # e.g. a rule changed since
    again = api.get(f"/api/runs/{run.pk}/").json()
    assert (again["effective_time_budget"], again["time_budget_source"]) == (300, "time_limit")
