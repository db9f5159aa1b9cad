"""Task 1b as one process: real-layout ImageNet files, the fallback, errors, options, schedules."""

import json
import math

import numpy as np
import pytest
from PIL import Image

from mlbench_worker.tasks import TASKS
from mlbench_worker.tasks.imagenet.train import CosineSchedule
from mlbench_worker.training.options import parse_args

from .helpers import run_worker

SMALL = ["--batch-size", "8", "--crop", "64", "--max-epochs", "1", "--threads", "1",
         "--data-workers", "1", "--log-every", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def imagenet_dir(tmp_path_factory):
    """A complete ImageNet layout in miniature: 1000 class folders of small real JPEG files
    (one training image each, a validation image for every 100th class)."""
    data = tmp_path_factory.mktemp("data")
    root = data / "imagenet"
    rng = np.random.default_rng(0)
    for i in range(1000):
        wnid = f"n{i:08d}"
        pixels = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
        (root / "train" / wnid).mkdir(parents=True)
        Image.fromarray(pixels).save(root / "train" / wnid / f"{wnid}_1.JPEG")
        if i % 100 == 0:
            (root / "val" / wnid).mkdir(parents=True)
            Image.fromarray(pixels).save(root / "val" / wnid / f"ILSVRC2012_val_{i:08d}.JPEG")
    return data


def _summary(path):
    return next(json.loads(x) for x in path.read_text().splitlines() if '"summary"' in x)


def test_real_layout_trains_and_is_labelled_imagenet(tmp_path, imagenet_dir):
    metrics = tmp_path / "m.jsonl"
    proc = run_worker(
        ["resnet18-imagenet", "--dataset", "imagenet", "--data-dir", str(imagenet_dir),
         "--train-images", "16", "--metrics-file", str(metrics), *SMALL],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC" not in proc.stdout
    s = _summary(metrics)
    assert s["dataset"] == "imagenet" and s["model"] == "resnet18"
    assert s["config"]["train_images"] == 16 and s["config"]["test_images"] == 10
    assert s["target_accuracy"] == 0.695  # ResNet-18's standard goal
    assert s["final_val_top5_accuracy"] is not None


def test_auto_without_imagenet_falls_back_to_synthetic_files_loudly(tmp_path):
    metrics = tmp_path / "m.jsonl"
    proc = run_worker(
        ["resnet18-imagenet", "--data-dir", str(tmp_path / "data"), "--train-images", "16",
         "--test-images", "8", "--metrics-file", str(metrics), *SMALL],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC DATA" in proc.stdout and "ImageNet not found" in proc.stdout
    s = _summary(metrics)
    assert s["dataset"] == "synthetic" and "imagenet/train/<wnid>/*.JPEG" in s["dataset_note"]
    assert (tmp_path / "data" / "imagenet-synthetic" / "manifest.json").is_file()


def test_imagenet_requested_but_missing_says_where_to_put_it(tmp_path):
    proc = run_worker(
        ["resnet50-imagenet", "--dataset", "imagenet", "--data-dir", str(tmp_path), *SMALL]
    )
    assert proc.returncode == 1
    assert f"{tmp_path}/imagenet/train/<wnid>/*.JPEG" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "argv, words",
    [
        (["resnet20-cifar10", "--label-smoothing", "0.1"], "--label-smoothing applies to task 1b"),
        (["resnet20-cifar10", "--crop", "96"], "--crop applies to task 1b"),
        (["resnet50-imagenet", "--crop", "32"], "--crop must be at least 64"),
        (["resnet50-imagenet", "--crop", "600"], "and at most 512 pixels, got 600"),
        (["resnet50-imagenet", "--label-smoothing", "1"], "at least 0 and below 1"),
        (["resnet50-imagenet", "--lr-schedule", "linear"], "choose one of: step, cosine, poly"),
        (["resnet50-imagenet", "--amp-dtype", "bfloat16"], "--amp-dtype needs --amp"),
        (["resnet50-imagenet", "--amp", "--amp-dtype", "float16", "--device", "cpu"], "CUDA"),
        (["resnet50-imagenet", "--model", "resnet20"], "resnet18, resnet34, resnet50, resnet101"),
        (["resnet20-cifar10", "--model", "resnet50"], "resnet20"),
        (["resnet50-imagenet", "--dataset", "cifar10"], "auto, imagenet, synthetic"),
        (["resnet50-imagenet", "--target", "paper"], "light, standard"),
    ],
)
def test_bad_options_are_named(tmp_path, capsys, argv, words):
    with pytest.raises(SystemExit) as raised:
        parse_args([*argv, "--data-dir", str(tmp_path)])
    assert raised.value.code == 2
    assert words in capsys.readouterr().err


def test_task_defaults_fill_the_imagenet_options(tmp_path):
    args = parse_args(["resnet101-imagenet", "--data-dir", str(tmp_path)])
    assert (args.model, args.batch_size, args.max_epochs) == ("resnet101", 256, 90)
    assert (args.lr_schedule, args.label_smoothing, args.zero_init_residual) == ("step", 0.0, True)
    args = parse_args(
        ["resnet50-imagenet", "--no-zero-init-residual", "--lr-schedule", "cosine",
         "--data-dir", str(tmp_path)]
    )  # fmt: skip
    assert args.zero_init_residual is False and args.lr_schedule == "cosine"


def test_cosine_schedule_after_the_warm_up():
    s = CosineSchedule(0.1, 0.4, 10, (), 1.0, total_steps=110)
    assert s(0) == pytest.approx(0.1) and s(5) == pytest.approx(0.25)
    assert s(10) == pytest.approx(0.4) and s(60) == pytest.approx(0.2) and s(110) == 0
    assert s(200) == 0  # past the end (a run given more epochs than the schedule) stays at 0
    rates = [s(i) for i in range(10, 111)]
    assert rates == sorted(rates, reverse=True)
    assert s(35) == pytest.approx(0.2 * (1 + math.cos(math.pi / 4)))


def test_the_recipe_is_goyals():
    for depth in (18, 34, 50, 101):
        task = TASKS[f"resnet{depth}-imagenet"]
        assert (task.batch_size, task.base_lr, task.max_epochs) == (256, 0.1, 90)
        assert (task.momentum, task.weight_decay, task.warmup_epochs) == (0.9, 1e-4, 5)
        assert (task.decay_epochs, task.decay_factor) == ((30, 60, 80), 0.1)
    assert TASKS["resnet50-imagenet"].targets == {"light": 0.5, "standard": 0.759}
