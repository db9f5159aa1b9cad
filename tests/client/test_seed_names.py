"""Our client and `mlbench` command take the names the original client used: its display
names ("PyTorch Cifar-10 ResNet-20"), official image names, backends in any case."""

import pytest

from mlbench_worker.client import api
from mlbench_worker.client.api import ApiClient, resolve_image
from mlbench_worker.client.cli.master import EXIT_USAGE


@pytest.mark.parametrize(
    "name, task",
    [
        ("PyTorch Cifar-10 ResNet-20", "resnet20-cifar10"),
        ("  pytorch   cifar-10 resnet-20 ", "resnet20-cifar10"),
        ("PyTorch Cifar-10 ResNet-20 (DDP)", "resnet20-cifar10"),
        ("pytorch cifar-10 resnet-20 (ddp)", "resnet20-cifar10"),
        ("PyTorch Linear Logistic Regression", "logreg-epsilon"),
        ("mlbench/pytorch-epsilon-logistic-regression-all-reduce:latest", "logreg-epsilon"),
        ("resnet56-cifar10", "resnet56-cifar10"),
    ],
)
def test_names_resolve_to_tasks(name, task):
    assert resolve_image(name) == task


def test_unknown_and_unimplemented_names_list_the_known_ones():
    with pytest.raises(ValueError, match="not found; known benchmarks: PyTorch Cifar-10"):
        resolve_image("PyTorch MNIST LeNet")
    with pytest.raises(ValueError, match="is not implemented here yet"):
        resolve_image("PyTorch Machine Translation GNMT")


def test_the_image_table_has_the_original_shape():
    image, command, run_on_all, gpu = api.MLBENCH_IMAGES["PyTorch Cifar-10 ResNet-20"]
    assert image == "mlbench/pytorch-cifar10-resnet20-all-reduce:latest"
    assert command.endswith("resnet20-cifar10") and run_on_all is True and gpu is True
    assert "PyTorch Linear Logistic Regression" in api.MLBENCH_IMAGES


@pytest.mark.mpi
def test_create_run_by_display_name_and_backend_in_capitals(master):
    with ApiClient(url=master.url, token=master.token, in_cluster=False) as client:
        with pytest.raises(ValueError, match="known benchmarks"):
            client.create_run("x", 1, image="PyTorch MNIST LeNet")
        response = client.create_run(
            "by-title", 1, num_cpus=1.0, image="PyTorch Cifar-10 ResNet-20", backend="GLOO"
        ).result()
        assert response.status_code == 201, response.text
        run = response.json()
        try:
            assert (run["task"], run["backend"]) == ("resnet20-cifar10", "gloo")
        finally:
            assert client.delete_run(run["id"]).result().status_code == 204


@pytest.mark.mpi
def test_cli_takes_display_names_and_refuses_unknown_ones(master):
    unknown = master.cli("run", "x", "--workers", "1", "--task", "PyTorch MNIST LeNet")
    assert unknown.returncode == EXIT_USAGE
    # --task asks for a task: the error says "unknown task" and lists the tasks first.
    said = unknown.stderr
    assert "--task: unknown task 'PyTorch MNIST LeNet'; the tasks: resnet20-cifar10," in said
    assert "image" not in said.split("; the tasks")[0], said
    assert said.index("logreg-epsilon") < said.index("'PyTorch Cifar-10 ResNet-20'")
    typo = master.cli("run", "x", "--workers", "1", "--task", "resnet99-cifar10")
    assert typo.returncode == EXIT_USAGE and "unknown task 'resnet99-cifar10'" in typo.stderr
    gnmt = master.cli("run", "x", "--task", "PyTorch Machine Translation GNMT")
    assert (
        gnmt.returncode == EXIT_USAGE and "is not implemented here yet; the tasks:" in gnmt.stderr
    )
    made = master.cli(
        "run", "cli-title", "--workers", "1", "--task", "pytorch cifar-10 resnet-20",
        "--backend", "GLOO",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.split()[1]
    try:
        shown = master.cli("show", run_id)
        assert "resnet20-cifar10" in shown.stdout and "gloo" in shown.stdout
    finally:
        assert master.cli("delete", run_id).returncode == 0
