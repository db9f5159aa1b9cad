"""The worker's command line: bad input gives a clear message and a non-zero exit."""

import subprocess
import sys

import pytest

from .helpers import make_cifar_folder, run_worker, worker_env

TASK = "resnet20-cifar10"


@pytest.mark.parametrize(
    "args,message",
    [
        (["resnet99-mnist"], "unknown task 'resnet99-mnist'; choose one of: resnet20-cifar10"),
        ([TASK, "--model", "vgg16"], "--model: unknown value 'vgg16'; choose one of: resnet20"),
        (
            [TASK, "--backend", "tcp"],
            "--backend: unknown value 'tcp'; choose one of: mpi, gloo, nccl",
        ),
        ([TASK, "--dataset", "imagenet"], "--dataset: unknown value 'imagenet'"),
        ([TASK, "--target", "perfect"], "--target: unknown value 'perfect'"),
        ([TASK, "--threads", "0"], "argument --threads: must be a positive number, got '0'"),
        (
            [TASK, "--time-budget", "-5"],
            "argument --time-budget: must be a positive number, got '-5'",
        ),
        ([TASK, "--max-epochs", "two"], "argument --max-epochs: must be a whole number, got 'two'"),
        ([TASK, "--batch-size", "-1"], "argument --batch-size: must be a positive number"),
        ([TASK, "--lr", "0"], "argument --lr: must be a positive number"),
        ([TASK, "--resume"], "--resume needs --checkpoint-dir"),
        ([TASK, "--master-url", "http://x:1"], "--master-url needs --run-id"),
        ([TASK, "--backend", "nccl", "--device", "cpu"], "--backend nccl needs --device cuda"),
    ],
)
def test_bad_options_are_named(args, message):
    proc = run_worker(args, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unwritable_data_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_worker([TASK, "--data-dir", str(blocker / "datasets")], timeout=60)
    assert proc.returncode == 2
    assert f"data directory {blocker / 'datasets'} cannot be written" in proc.stderr
    assert "MLBENCH_DATA_DIR" in proc.stderr


def test_package_and_option_parsing_do_not_import_torch():
    code = (
        "import sys, mlbench_worker, mlbench_worker.training.options, mlbench_worker.tasks, "
        "mlbench_worker.models, mlbench_worker.training.errors; "
        "mlbench_worker.training.options.parse_args(['resnet20-cifar10', '--dataset', 'synthetic']); "
        "assert 'torch' not in sys.modules and 'mpi4py' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=worker_env())


def test_failed_download_with_cifar10_says_how_to_place_files(tmp_path):
    proc = run_worker(
        [TASK, "--dataset", "cifar10", "--data-dir", str(tmp_path)],
        MLBENCH_CIFAR10_URL="http://127.0.0.1:9/cifar-10-python.tar.gz",
    )
    assert proc.returncode == 1
    assert "Could not download CIFAR-10" in proc.stderr
    assert (
        "To place it by hand" in proc.stderr
        and str(tmp_path / "cifar-10-python.tar.gz") in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_corrupt_batch_file_stops_the_run(tmp_path):
    folder = make_cifar_folder(tmp_path)
    (folder / "data_batch_2").write_bytes(b"not a pickle at all")
    proc = run_worker([TASK, "--dataset", "cifar10", "--data-dir", str(tmp_path)])
    assert proc.returncode == 1
    # The official checksums catch it first; either way the file is named.
    assert "data_batch_1" in proc.stderr or "data_batch_2" in proc.stderr
    assert "Traceback" not in proc.stderr
