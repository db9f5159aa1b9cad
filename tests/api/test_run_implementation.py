"""A run's implementation through POST /api/runs/ (run_rules/implementations.py): the
default, each task's list, the backend it brings, the seed client's DDP and TensorFlow
images, resuming, workers that lack a framework, and what the worker's command gets."""

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_master.cluster.local.driver import LocalCluster
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared.implementation_catalogue import IMPLEMENTATIONS

pytestmark = pytest.mark.django_db


def create(client, **fields):
    return client.post("/api/runs/", {"name": "impl", **fields}, format="json")


def argv_of(body: dict) -> list[str]:
    return worker_argv(lifecycle.run_spec(Run.objects.get(pk=body["id"])))


def test_a_run_without_an_implementation_is_the_reference_with_an_unchanged_command(
    api, redis_settings
):
    body = create(api).json()
    assert body["implementation"] == "reference"
    assert body["manifest"]["config"]["implementation"] == "reference"
    assert body["manifest"]["setup"]["implementation"] == "reference"
    assert body["manifest"]["framework"]["name"] == "pytorch"
    assert body["manifest"]["framework"]["version"].startswith("2.13")  # the local workers'
    assert "--implementation" not in argv_of(body)


def test_torch_ddp_gets_gloo_for_the_default_backend(api, redis_settings):
    body = create(api, implementation="torch-ddp").json()
    assert (body["implementation"], body["backend"]) == ("torch-ddp", "gloo")
    argv = argv_of(body)
    assert argv[argv.index("--implementation") + 1] == "torch-ddp"
    assert argv[argv.index("--backend") + 1] == "gloo"


def test_tensorflow_keeps_the_default_backend_and_records_its_framework(
    api, redis_settings, monkeypatch
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    body = create(api, implementation="tensorflow").json()
    assert (body["implementation"], body["backend"]) == ("tensorflow", "mpi")
    assert body["manifest"]["framework"]["name"] == "tensorflow"
    argv = argv_of(body)
    assert argv[argv.index("--implementation") + 1] == "tensorflow"


@pytest.mark.parametrize(
    "image, implementation",
    [
        ("mlbench/pytorch-cifar10-resnet20-ddp:latest", "torch-ddp"),
        ("mlbench/tensorflow-cifar10-resnet:latest", "tensorflow"),
        ("mlbench/pytorch-cifar10-resnet20-all-reduce:latest", "reference"),
    ],
)
def test_the_seed_clients_images_run_their_implementation(
    api, redis_settings, monkeypatch, image, implementation
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    response = create(api, image_name=image)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["task"], body["implementation"]) == ("resnet20-cifar10", implementation)


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"implementation": "jax"}, "implementation",
         "implementation 'jax' is not known (there are reference, torch-ddp, tensorflow, spark, flink); task "
         "resnet20-cifar10 has reference, torch-ddp, tensorflow"),
        ({"task": "logreg-epsilon", "implementation": "JAX"}, "implementation",
         "implementation 'JAX' is not known (there are reference, torch-ddp, tensorflow, spark, flink); "
         "task logreg-epsilon has reference, spark"),
        ({"task": "logreg-epsilon", "implementation": "torch-ddp"}, "implementation",
         "implementation 'torch-ddp' is not one of task logreg-epsilon's: reference, spark"),
        ({"implementation": "spark"}, "implementation",
         "implementation 'spark' is not one of task resnet20-cifar10's: reference, torch-ddp, "
         "tensorflow"),
        ({"task": "logreg-epsilon", "implementation": "spark", "algorithm": "powersgd"},
         "implementation", "implementation spark runs algorithm allreduce, lbfgs only, not "
         "'powersgd'"),
        ({"task": "logreg-epsilon", "algorithm": "lbfgs"}, "implementation",
         "algorithm lbfgs runs on implementation spark only, not on reference"),
        ({"algorithm": "lbfgs"}, "algorithm",
         "algorithm 'lbfgs' is not one of task resnet20-cifar10's: allreduce, powersgd"),
        ({"task": "logreg-epsilon", "implementation": "spark", "algorithm": "lbfgs",
          "algorithm_options": {"iterations": 0}}, "algorithm_options",
         "iterations must be at least 1 and at most 1000, not 0"),
        ({"task": "logreg-epsilon", "implementation": "spark", "backend": "gloo"}, "backend",
         "implementation spark all-reduces with Spark's broadcast and tree aggregate"),
        ({"task": "logreg-epsilon", "implementation": "spark", "gpu_enabled": True},
         "gpu_enabled", "implementation spark trains on CPUs only"),
        ({"task": "preact-resnet20-cifar10", "implementation": "tensorflow"}, "implementation",
         "is not one of task preact-resnet20-cifar10's: reference, torch-ddp"),
        ({"implementation": "torch-ddp", "algorithm": "powersgd"}, "implementation",
         "implementation torch-ddp runs algorithm allreduce only, not 'powersgd'"),
        ({"implementation": "torch-ddp", "backend": "mpi"}, "backend",
         "implementation torch-ddp runs on backend gloo or nccl, not 'mpi'"),
        ({"implementation": "tensorflow", "backend": "gloo"}, "backend",
         "implementation tensorflow all-reduces with TensorFlow's own collective ops"),
        ({"task": "backend-benchmark", "implementation": "torch-ddp"}, "implementation",
         "task backend-benchmark trains nothing, so it has no implementation"),
        ({"image_name": "mlbench/pytorch-cifar10-resnet20-ddp", "implementation": "reference"},
         "implementation", "runs implementation torch-ddp, not 'reference'"),
    ],
)  # fmt: skip
def test_bad_implementations_are_a_400_naming_the_field(
    api, redis_settings, monkeypatch, fields, field, words
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    response = create(api, **fields)
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["errors"][field])
    assert not Run.objects.exists()


def test_a_blank_implementation_is_left_out_as_a_form_sends_it(api, redis_settings):
    body = create(api, implementation="").json()
    assert body["implementation"] == "reference"


@pytest.mark.parametrize(
    "lacking, words",
    [
        ("pyspark", "needs pyspark, which the workers' Python cannot import"),
        ("program:java", "needs java, which the workers' PATH lacks"),
    ],
)
def test_workers_without_pyspark_or_java_refuse_spark_with_the_fix(
    api, redis_settings, monkeypatch, lacking, words
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: module != lacking)
    response = create(api, task="logreg-epsilon", implementation="spark")
    assert response.status_code == 400
    said = response.json()["errors"]["implementation"][0]
    assert words in said, said
    assert "pip install 'mlbench[spark]'" in said and "apt-get install default-jre-headless" in said
    assert "choose one of reference" in said
    assert not Run.objects.exists()
    served = api.get("/api/runs/defaults/").json()["implementations"]["spark"]
    assert served["available"] is False and "default-jre-headless" in served["install"]


def test_a_spark_run_on_workers_that_have_it_records_spark(api, redis_settings):
    """This machine's workers (the master's own Python, asked for real) have pyspark and
    java: the run is created with Spark's version in its manifest and the worker's
    command."""
    response = create(api, task="logreg-epsilon", implementation="spark", algorithm="lbfgs")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["implementation"], body["algorithm"]) == ("spark", "lbfgs")
    assert body["algorithm_options"] == {"iterations": 5}
    framework = body["manifest"]["framework"]
    assert framework["name"] == "spark" and framework["version"].startswith("4.")
    argv = argv_of(body)
    assert argv[argv.index("--implementation") + 1] == "spark"
    assert argv[argv.index("--algorithm") + 1] == "lbfgs"


def test_workers_without_tensorflow_refuse_it_with_the_fix(api, redis_settings, monkeypatch):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: module != "tensorflow")
    response = create(api, implementation="tensorflow")
    assert response.status_code == 400
    words = response.json()["errors"]["implementation"][0]
    assert "needs tensorflow, which the workers' Python cannot import" in words
    assert "pip install 'mlbench[tensorflow]'" in words
    assert "choose one of reference, torch-ddp" in words
    assert not Run.objects.exists()
    served = api.get("/api/runs/defaults/").json()["implementations"]["tensorflow"]
    assert served["available"] is False and "mlbench[tensorflow]" in served["install"]


def test_the_local_driver_asks_the_workers_python_without_importing(settings):
    import sys

    driver = LocalCluster()
    assert driver.has_module("torch") is True
    assert driver.has_module("no_such_framework_here") is False
    assert "tensorflow" not in sys.modules  # asked, never imported


def test_a_custom_command_has_no_implementation(staff_api, redis_settings):
    body = create(staff_api, custom_image_command="python mine.py").json()
    assert body["implementation"] == ""
    assert body["manifest"]["framework"] is None
    refused = create(staff_api, custom_image_command="python mine.py", implementation="torch-ddp")
    assert "a custom command trains as it likes" in refused.json()["errors"]["implementation"][0]


def test_a_resumed_run_keeps_its_parents_implementation_and_no_other(api, make_run, redis_settings):
    from tests.api.test_resume import checkpoint

    parent = make_run(state=Run.FAILED, num_workers=2, implementation="torch-ddp",
                      backend="gloo")  # fmt: skip
    checkpoint(parent, 1, 196, 30.0, implementation="torch-ddp")
    same = create(api, resume_from=parent.pk).json()
    assert (same["implementation"], same["backend"]) == ("torch-ddp", "gloo")
    Run.objects.filter(pk=same["id"]).update(state=Run.CANCELLED)
    other = create(api, resume_from=parent.pk, implementation="reference", backend="gloo")
    assert other.status_code == 400
    assert (
        "checkpoint is for implementation 'torch-ddp'" in (other.json()["errors"]["resume_from"][0])
    )


def test_a_tensorflow_run_cannot_resume(api, make_run, redis_settings, monkeypatch):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    parent = make_run(state=Run.FAILED, num_workers=2, implementation="tensorflow")
    response = create(api, resume_from=parent.pk)
    assert response.status_code == 400
    assert (
        "implementation tensorflow writes no checkpoints"
        in (response.json()["errors"]["resume_from"][0])
    )


def test_defaults_serve_every_implementation_and_each_tasks_list(api):
    body = api.get("/api/runs/defaults/").json()
    assert body["defaults"]["implementation"] == "reference"
    assert set(body["implementations"]) == set(IMPLEMENTATIONS)
    ddp = body["implementations"]["torch-ddp"]
    assert ddp["framework"] == "pytorch" and ddp["backends"] == ["gloo", "nccl"]
    assert ddp["available"] is True
    assert body["tasks"]["resnet20-cifar10"]["implementations"] == [
        "reference", "torch-ddp", "tensorflow"
    ]  # fmt: skip
    assert body["tasks"]["logreg-epsilon"]["implementations"] == ["reference", "spark", "flink"]
    assert run_rules.DEFAULTS["implementation"] == next(iter(IMPLEMENTATIONS))
