"""POST /api/runs/ for the backend benchmark (`backend-benchmark`): a measurement, so
the training fields are refused by name, its backends default to every one the device has,
it gets a time limit from its budget and no checkpoint folder, and the command the master
builds for it is one its worker accepts."""

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.backend_benchmark.options import parse_args
from mlbench_worker.client import api as client_api
from mlbench_worker.shared import catalogue

pytestmark = pytest.mark.django_db

TASK = "backend-benchmark"
IMAGE = "mlbench/pytorch-backend-benchmark"
BASE = {"name": "comm", "num_workers": 2, "num_cpus": 1}


def _create(client, **fields):
    return client.post("/api/runs/", {**BASE, **fields}, format="json")


def test_the_task_runs_with_every_cpu_backend_and_its_budget(staff_api, redis_settings):
    r = _create(staff_api, task=TASK)
    assert r.status_code == 201, r.content
    body = r.json()
    info = catalogue.get(TASK)
    assert (body["task"], body["backend"], body["target"]) == (TASK, "mpi,gloo", "")
    assert body["effective_time_budget"] == info.time_budget
    assert body["time_limit"] == run_rules.minimum_time_limit(info.time_budget)


def test_the_original_clients_image_and_display_name_select_it(staff_api, redis_settings):
    r = _create(staff_api, image_name=f"{IMAGE}:latest", backend="GLOO")
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    assert (run.task, run.image, run.backend) == (TASK, f"{IMAGE}:latest", "gloo")
    assert client_api.resolve_image("PyTorch Distributed Backend benchmarking") == TASK
    assert client_api.MLBENCH_IMAGES["PyTorch Distributed Backend benchmarking"][0] == (
        f"{IMAGE}:latest"
    )


def test_the_forms_defaults_are_accepted(staff_api, redis_settings):
    r = _create(staff_api, task=TASK, dataset="auto", light_target=False, time_budget=60)
    assert r.status_code == 201, r.content
    assert (r.json()["effective_time_budget"], r.json()["time_limit"]) == (
        60,
        run_rules.minimum_time_limit(60),
    )


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"target": "standard"}, "target", "no accuracy goal"),
        ({"light_target": True}, "light_target", "no accuracy goal"),
        ({"dataset": "cifar10"}, "dataset", "reads no data"),
        ({"max_epochs": 3}, "max_epochs", "no epochs"),
        ({"resume_from": 1}, "resume_from", "keeps no checkpoints"),
        ({"num_workers": 1}, "num_workers", "2 workers or more"),
        ({"backend": "nccl"}, "backend", "needs GPUs"),
        ({"backend": "carrier-pigeon"}, "backend", "is not one of"),
    ],
)
def test_what_does_not_apply_is_refused_by_name(staff_api, fields, field, words):
    r = _create(staff_api, task=TASK, **fields)
    assert r.status_code == 400, r.content
    message = " ".join(r.json()["errors"][field])
    assert words in message
    assert not Run.objects.exists()


def test_the_masters_command_is_one_the_worker_accepts(make_run):
    run = make_run(state=Run.INITIALIZED, task=TASK, backend="mpi,gloo", target="", num_cpus=1.0)
    spec = lifecycle.run_spec(run, checkpoints=lambda run_id: f"/checkpoints/{run_id}")
    assert spec.checkpoint_dir == "" and spec.resume_dir == ""
    argv = worker_argv(spec)
    assert argv[:4] == ["python", "-m", "mlbench_worker", TASK]
    args = parse_args(argv[4:])
    assert args.backends == ["mpi", "gloo"]
    assert args.time_budget == catalogue.get(TASK).time_budget
    assert args.device == "cpu" and args.threads == 1


def test_a_training_run_still_gets_its_checkpoint_folder(make_run):
    run = make_run(state=Run.INITIALIZED, task="resnet20-cifar10")
    spec = lifecycle.run_spec(run, checkpoints=lambda run_id: f"/checkpoints/{run_id}")
    assert spec.checkpoint_dir == f"/checkpoints/{run.pk}"


def test_a_custom_command_may_name_the_measurement_task(staff_api, redis_settings):
    """The open division runs its own command: the task's lack of goals and data sets is
    not its concern (as before the run rules moved)."""
    r = _create(staff_api, task=TASK, custom_image_command="python mine.py")
    assert r.status_code == 201, r.content
    r = _create(staff_api, task=TASK, custom_image_command="python mine.py", dataset="cifar10")
    assert r.status_code == 400
    assert "reads no data set" in r.json()["errors"]["dataset"][0]
