"""Accuracy after time: every reference run trains for a time budget (its own, else its
task's), and its time limit, a hard stop, leaves run_rules.TIME_LIMIT_MARGIN beyond it.

The last test runs a default run (no time_budget, no time_limit) through the real job, the
local driver, mpirun with 2 ranks and the live API, with the task's budget shortened to a
few seconds: it must stop by its budget, evaluate the final model and end FINISHED.
"""

import dataclasses

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import catalogue

pytestmark = pytest.mark.django_db

MARGIN = run_rules.TIME_LIMIT_MARGIN
TASK1 = catalogue.get("resnet20-cifar10")
TASK2 = catalogue.get("logreg-epsilon")


def create(api, **fields):
    body = {"name": "budget", "num_workers": 2, **fields}
    return api.post("/api/runs/", body, format="json")


def test_a_default_run_trains_for_its_tasks_budget_with_room_to_finish(api, redis_settings):
    response = create(api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["time_budget"] is None  # as asked: none
    assert body["effective_time_budget"] == TASK1.time_budget == 7200  # the seed's 2 hours
    assert body["time_limit"] == 7200 + MARGIN
    assert body["manifest"]["config"]["effective_time_budget"] == 7200
    spec = lifecycle.run_spec(Run.objects.get(pk=body["id"]))
    assert spec.time_budget == 7200
    argv = worker_argv(spec)
    assert argv[argv.index("--time-budget") + 1] == "7200"


def test_task_2_gets_its_own_budget(api, redis_settings):
    response = create(api, task="logreg-epsilon")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["effective_time_budget"] == TASK2.time_budget
    assert body["time_limit"] == int(TASK2.time_budget) + MARGIN


def test_an_explicit_budget_sets_the_default_limit(api, redis_settings):
    # What `make run` sends: --time-budget 120 and no time limit.
    response = create(api, time_budget=120, dataset="auto")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["time_budget"], body["effective_time_budget"]) == (120, 120)
    assert body["time_limit"] == 120 + MARGIN
    # A fractional budget's limit is rounded up, never below budget + margin.
    Run.objects.all().delete()
    response = create(api, time_budget=60.5)
    assert response.json()["time_limit"] == 61 + MARGIN


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"time_budget": 100, "time_limit": 50}, ["time_budget 100 s", f"{100 + MARGIN} s"]),
        ({"time_budget": 100, "time_limit": 99 + MARGIN}, [f"{100 + MARGIN} s"]),
    ],
)
def test_a_limit_without_room_for_the_budget_is_a_400(api, redis_settings, fields, words):
    response = create(api, **fields)
    assert response.status_code == 400, response.json()
    errors = response.json()["errors"]
    message = errors["time_limit"][0]
    assert errors["time_budget"] == [message]  # both fields named: give either, not both
    assert "time_budget" in message and "start-up and the final evaluation" in message
    for word in words:
        assert word in message
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    "limit, budget, source",
    [
        (600, 300, "time_limit"),  # shorter than twice the margin: half of it
        (2000, 2000 - MARGIN, "time_limit"),  # the limit less the margin
        (7200, 7200 - MARGIN, "time_limit"),
        (7200 + MARGIN, 7200, "task"),
        (20000, 7200, "task"),  # the task's budget when it is the shorter
    ],
)
def test_a_time_limit_alone_trains_for_what_fits_or_the_tasks_budget(
    api, redis_settings, limit, budget, source
):
    response = create(api, time_limit=limit)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["time_limit"], body["time_budget"]) == (limit, None)
    assert (body["effective_time_budget"], body["time_budget_source"]) == (budget, source)
    config = body["manifest"]["config"]
    assert (config["effective_time_budget"], config["time_budget_source"]) == (budget, source)
    run = Run.objects.get(pk=body["id"])
    argv = worker_argv(lifecycle.run_spec(run))
    assert float(argv[argv.index("--time-budget") + 1]) == budget


def test_a_limit_of_exactly_budget_plus_margin_is_enough(api, redis_settings):
    response = create(api, time_budget=100, time_limit=100 + MARGIN)
    assert response.status_code == 201, response.json()


def test_a_budget_the_maximum_limit_cannot_hold_is_a_400(api, settings, redis_settings):
    settings.MLBENCH_MAX_TIME_LIMIT = 3600
    response = create(api)  # the task's 7200 s budget needs 8100 s
    assert response.status_code == 400
    message = response.json()["errors"]["time_budget"][0]
    assert "the task's" in message and "MLBENCH_MAX_TIME_LIMIT=3600" in message
    assert Run.objects.count() == 0
    assert create(api, time_budget=600).status_code == 201  # a shorter budget fits


def test_the_open_division_has_no_budget_and_the_operators_default_limit(
    staff_api, settings, redis_settings
):
    settings.MLBENCH_DEFAULT_TIME_LIMIT = 3333
    response = create(staff_api, custom_image_command="python train.py")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["effective_time_budget"] is None and body["time_limit"] == 3333
    spec = lifecycle.run_spec(Run.objects.get(pk=body["id"]), checkpoints=lambda i: f"/c/run-{i}")
    assert spec.time_budget is None and spec.checkpoint_dir == ""  # no checkpoints either
    Run.objects.all().delete()
    # A short limit is fine for a command (no budget to leave room for) ...
    response = create(staff_api, custom_image_command="python train.py", time_limit=5)
    assert response.status_code == 201, response.json()
    Run.objects.all().delete()
    # ... but a budget means nothing to it: said, not silently ignored.
    response = create(staff_api, custom_image_command="python train.py", time_budget=60)
    assert response.status_code == 400
    assert "custom command" in response.json()["errors"]["time_budget"][0]
    assert Run.objects.count() == 0


def test_run_spec_resolves_the_budget_and_checkpoint_folder(make_run):
    run = make_run(state=Run.INITIALIZED, task="logreg-epsilon", num_workers=2)
    spec = lifecycle.run_spec(run, checkpoints=lambda i: f"/ckpt/run-{i}")
    assert spec.time_budget == TASK2.time_budget
    assert spec.checkpoint_dir == f"/ckpt/run-{run.pk}" and spec.resume_dir == ""
    assert lifecycle.run_spec(run).checkpoint_dir == ""  # only the job, with a driver, fills it in
    own = make_run(state=Run.FINISHED, time_budget=30.0)
    assert lifecycle.run_spec(own).time_budget == 30.0


# --------------------------------------------------------------------------- the real thing


@pytest.mark.mpi
@pytest.mark.slow
def test_a_default_run_stops_by_its_budget_and_finishes_with_its_accuracy(
    api, live_server, settings, redis_settings, transactional_db, monkeypatch, tmp_path
):
    """No time_budget given: the task's budget (shortened here to 3 s, a task-level
    override) reaches the worker, which stops training, evaluates the final model and
    reports it; the run ends FINISHED, not FAILED by its time limit. Its test set is 1,000
    of the 10,000 images (the run's own field, test_examples, which neither sets nor reads
    the budget): the final evaluation of the whole set took 11 of the run's 26 s."""
    from mlbench_master.runs.jobs import run_job

    monkeypatch.setitem(catalogue.TASKS, TASK1.name, dataclasses.replace(TASK1, time_budget=3.0))
    settings.MLBENCH_MASTER_URL = live_server.url
    settings.MLBENCH_LOCAL_WORKERS = 2
    response = create(api, num_cpus=1, dataset="synthetic", test_examples=1000)
    assert response.status_code == 201, response.json()
    run_id = response.json()["id"]
    assert response.json()["time_limit"] == 3 + MARGIN

    assert run_job(run_id) == Run.FINISHED
    run = Run.objects.get(pk=run_id)
    assert run.state == Run.FINISHED and run.exit_code == 0, run.reason
    summary = run.summary
    assert summary["stop_reason"] == "time budget spent"
    assert summary["config"]["time_budget"] == 3
    assert summary["elapsed"] >= 3  # the clock ran the whole budget
    assert summary["final_val_accuracy"] is not None  # the final model was evaluated
    assert summary["epochs"] < 1  # stopped mid-epoch by the budget, not by the epoch limit
    argv = run.job_metadata["local"]["argv"]
    assert argv[argv.index("--time-budget") + 1] == "3"
    assert run.job_metadata["checkpoint_dir"] == str(tmp_path / "checkpoints" / f"run-{run_id}")


def test_the_manual_states_each_tasks_budget():
    """docs/tasks.rst, "Budgets per task", says what the catalogue says."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "tasks.rst").read_text()
    table = text[text.index("Budgets per task") :].split("A run therefore ends")[0]
    rows = table.split("   * - ")[2:]  # after the header row
    for info in catalogue.TASKS.values():
        row = next((r for r in rows if f"``{info.name}``" in r), None)
        assert row is not None, f"{info.name} is missing from docs/tasks.rst's budgets"
        assert f"- {info.time_budget:g} s" in row, (info.name, info.time_budget, row)
