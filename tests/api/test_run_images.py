"""POST /api/runs/: official images, the open division and backends as the original client
names them (image_name, "custom_image", "MPI", "custom_backend")."""

import pytest

from mlbench_master.api.models import Run
from mlbench_master.run_rules import LOCAL_IMAGE_REFUSED
from mlbench_master.run_rules.images import SLURM_IMAGE_REFUSED

pytestmark = pytest.mark.django_db

BASE = {"name": "images", "num_workers": 1}
RESNET20 = "mlbench/pytorch-cifar10-resnet20-all-reduce"


def _create(client, **fields):
    return client.post("/api/runs/", {**BASE, **fields}, format="json")


@pytest.mark.parametrize(
    "image, task",
    [
        (f"{RESNET20}:latest", "resnet20-cifar10"),
        (f"{RESNET20}:3.0.0", "resnet20-cifar10"),
        ("mlbench/pytorch-cifar10-resnet20-ddp:latest", "resnet20-cifar10"),
        ("mlbench/pytorch-epsilon-logistic-regression-all-reduce:latest", "logreg-epsilon"),
    ],
)
def test_an_official_image_runs_its_task(staff_api, redis_settings, image, task):
    r = _create(staff_api, image_name=image, backend="GLOO")
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    assert (run.task, run.image, run.backend) == (task, image, "gloo")


def test_image_and_task_must_agree(staff_api):
    r = _create(staff_api, image_name=f"{RESNET20}:latest", task="resnet56-cifar10")
    assert r.status_code == 400 and "runs task resnet20-cifar10" in r.json()["errors"]["task"][0]
    r = _create(staff_api, image=f"{RESNET20}:latest", image_name="custom_image")
    assert r.status_code == 400 and "different images" in r.json()["errors"]["image_name"][0]
    assert not Run.objects.exists()


def test_an_image_not_in_mlbench_tasks_is_not_offered(staff_api, settings):
    settings.MLBENCH_TASKS = ["resnet20-cifar10"]
    r = _create(staff_api, image_name="mlbench/pytorch-epsilon-logistic-regression-all-reduce")
    message = r.json()["errors"]["image_name"][0]
    assert r.status_code == 400 and "not implemented on this master" in message
    assert message.endswith("it runs " + ", ".join(
        f"{image}:latest" for image in (RESNET20, "mlbench/pytorch-cifar10-resnet20-ddp",
        "mlbench/pytorch-cifar10-resnet", "mlbench/pytorch-cifar10-resnet-scaling",
        "mlbench/tensorflow-cifar10-resnet")
    ))  # fmt: skip


def test_custom_image_needs_a_command(staff_api):
    r = _create(staff_api, image_name="custom_image")
    assert r.status_code == 400
    assert "needs custom_image_command" in r.json()["errors"]["custom_image_command"][0]


def test_the_local_cluster_refuses_an_image_but_runs_a_command(staff_api, redis_settings):
    r = _create(staff_api, image_name="custom_image", custom_image_name="me/mine:1",
                custom_image_command="true")  # fmt: skip
    assert r.status_code == 400
    assert r.json()["errors"]["custom_image_name"] == [LOCAL_IMAGE_REFUSED]
    r = _create(staff_api, image_name="custom_image", custom_image_command="true")
    assert r.status_code == 201, r.content


def test_the_slurm_cluster_refuses_an_image_as_it_has_no_containers(staff_api, settings):
    settings.MLBENCH_CLUSTER = "slurm"
    r = _create(staff_api, image_name="custom_image", custom_image_name="me/mine:1",
                custom_image_command="true")  # fmt: skip
    assert r.status_code == 400
    assert r.json()["errors"]["custom_image_name"] == [SLURM_IMAGE_REFUSED]
    assert not Run.objects.exists()


def test_on_kubernetes_an_image_never_runs_without_its_command(staff_api, settings):
    settings.MLBENCH_CLUSTER = "kubernetes"
    r = _create(staff_api, custom_image_name="me/mine:1")
    assert "needs custom_image_command" in r.json()["errors"]["custom_image_command"][0]
    r = _create(staff_api, task="resnet20-cifar10", image_name=f"{RESNET20}:latest",
                custom_image_name="me/mine:1")  # fmt: skip
    assert "open division" in r.json()["errors"]["custom_image_name"][0]
    assert not Run.objects.exists()


def test_a_custom_image_may_pass_kubernetes_validation(staff_api, settings, redis_settings):
    settings.MLBENCH_CLUSTER = "kubernetes"  # no driver is asked: validation only
    from mlbench_master import run_rules
    from mlbench_master.api.serializers import RunCreateSerializer

    form = {**BASE, "image_name": "custom_image", "custom_image_name": "me/mine:1",
            "custom_image_command": "python train.py", "backend": "custom_backend",
            "custom_backend": "horovod", "run_all_nodes": "true"}  # fmt: skip
    serializer = RunCreateSerializer(data=form)
    assert serializer.is_valid(), serializer.errors
    staff = type("Staff", (), {"is_staff": True})()
    filled = run_rules.fill(serializer.validated_data)
    data = run_rules.resolve(filled, staff, run_rules.ClusterLimits())
    assert (data["image"], data["backend"], data["custom_backend"], data["run_all_nodes"]) == (
        "custom_image", "custom", "horovod", True,
    )  # fmt: skip


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"backend": "custom_backend", "custom_backend": "horovod"}, "custom_image_command",
         "open division needs custom_image_command"),
        ({"custom_backend": "horovod"}, "custom_image_command", "needs custom_image_command"),
        ({"image_name": f"{RESNET20}:latest", "custom_backend": "horovod"}, "custom_backend",
         "for the open division"),
        ({"image_name": f"{RESNET20}:latest", "custom_image_command": "true"},
         "custom_image_command", "runs the reference task resnet20-cifar10"),
        ({"custom_image_command": "true", "backend": "custom_backend"}, "custom_backend",
         "needs custom_backend"),
        ({"custom_image_command": "true", "backend": "mpi", "custom_backend": "x"}, "backend",
         "disagree"),
        ({"backend": "Carrier-Pigeon"}, "backend", "any case"),
    ],
)  # fmt: skip
def test_backend_rules(staff_api, fields, field, words):
    r = _create(staff_api, **fields)
    assert r.status_code == 400, r.content
    assert words in r.json()["errors"][field][0]
    assert not Run.objects.exists()


@pytest.mark.parametrize("spelling", ["MPI", "mpi", "Mpi", " gloo "])
def test_backends_in_any_case(staff_api, redis_settings, spelling):
    r = _create(staff_api, backend=spelling)
    assert r.status_code == 201, r.content
    assert r.json()["backend"] == spelling.strip().lower()
