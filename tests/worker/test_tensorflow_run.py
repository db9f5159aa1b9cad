"""The TensorFlow implementation of task 1a (mlbench_worker/implementations/tensorflow/) against the
reference: the same network, the same shards in the same order, a 2-rank run under real
mpirun that reaches the light target and reports what a reference run reports, without
ever importing torch; options it cannot honour refused by name; a killed rank ending the
job quickly.

Skipped only where TensorFlow is missing and CI is not set: under CI=true a missing
TensorFlow fails these tests (`make test` installs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from mlbench_master.cluster.mpirun import launcher_argv
from mlbench_worker.shared import result
from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.test_sets import TestSet

from .helpers import (
    MPIRUN,
    RANK_BODY_SPY,
    REPO,
    assert_graded_as_reported,
    mpirun,
    rank_body_entries,
    run_worker,
    worker_env,
)

HAVE_TF = importlib.util.find_spec("tensorflow") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_TF and not os.environ.get("CI"),
    reason="tensorflow is not installed: pip install 'mlbench[tensorflow]'",
)

SYNTHETIC = [
    "resnet20-cifar10", "--implementation", "tensorflow", "--dataset", "synthetic",
    "--train-images", "3000", "--test-images", "500", "--batch-size", "64",
    "--threads", "1",
]  # fmt: skip
# Runs mlbench_worker as `python -m` would, says at exit whether torch was imported, and
# names the implementation each rank hands to the one rank body (helpers.RANK_BODY_SPY).
NO_TORCH_CHECK = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('TORCH_IMPORTED', 'torch' in sys.modules, flush=True))\n"
) + RANK_BODY_SPY


# --- the network ----------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [20, 32, 44, 56])
def test_the_keras_resnets_have_our_trainable_parameter_counts(depth):
    from mlbench_worker.implementations.tensorflow.model import build_model
    from mlbench_worker.models import build_model as torch_model

    keras_count = sum(
        int(np.prod(v.shape)) for v in build_model(f"resnet{depth}").trainable_weights
    )
    ours = sum(p.numel() for p in torch_model(f"resnet{depth}").parameters() if p.requires_grad)
    assert keras_count == ours
    if depth == 20:
        assert ours == 269_722


def test_with_our_weights_the_keras_resnet20_computes_what_ours_computes():
    """Same weights copied in, same logits out: padding, strides, shortcuts and batch
    norm (in inference, with running statistics) are the same network."""
    import torch

    from mlbench_worker.implementations.tensorflow.model import build_model
    from mlbench_worker.models import build_model as torch_model

    torch.manual_seed(0)
    ours = torch_model("resnet20").eval()
    with torch.no_grad():  # running statistics that are not the identity
        for m in ours.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    keras_model = build_model("resnet20")
    state = {k: v.numpy() for k, v in ours.state_dict().items()}

    def torch_prefix(keras_name: str) -> str:
        if keras_name.startswith("stage"):  # stage2_block3_conv1 -> layers.5.conv1
            stage, block, part = keras_name.split("_")
            index = (int(stage[5:]) - 1) * 3 + int(block[5:]) - 1
            return f"layers.{index}.{part}"
        return keras_name

    for layer in keras_model.layers:
        kind = type(layer).__name__
        if kind not in ("Conv2D", "BatchNormalization", "Dense"):
            continue
        prefix = torch_prefix(layer.name)
        if kind == "Conv2D":
            layer.set_weights([state[f"{prefix}.weight"].transpose(2, 3, 1, 0)])
        elif kind == "BatchNormalization":
            names = ("weight", "bias", "running_mean", "running_var")
            layer.set_weights([state[f"{prefix}.{n}"] for n in names])
        elif kind == "Dense":
            layer.set_weights([state["fc.weight"].T, state["fc.bias"]])
    x = np.random.default_rng(0).normal(size=(4, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = ours(torch.from_numpy(x)).numpy()
    got = keras_model(x.transpose(0, 2, 3, 1), training=False).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# --- the data -------------------------------------------------------------------------------
def test_each_rank_sees_the_reference_loaders_images_in_the_same_order():
    import torch

    from mlbench_worker.data.loader import Batches
    from mlbench_worker.implementations.tensorflow.data import ImageBatches
    from mlbench_worker.implementations.tensorflow.train import Trainer as TensorFlowTrainer
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.trainer import Trainer as ReferenceTrainer

    arrays = generate(5, 203, 10)  # 203 images: 2 ranks drop one, the last batch is short
    mean, std = (0.5, 0.4, 0.45), (0.2, 0.25, 0.3)
    theirs = Batches(arrays.train_x, arrays.train_y, 32, mean, std, augment=False)
    mine = ImageBatches(arrays.train_x, arrays.train_y, 32, mean, std, augment=False)
    for rank in (0, 1):
        for epoch in (0, 1):
            ref = SimpleNamespace(
                train_data=theirs, comm=SimpleNamespace(rank=rank, size=2), seed=7
            )
            tf_ = SimpleNamespace(
                train_data=mine, control=SimpleNamespace(rank=rank, size=2), seed=7
            )
            order = ReferenceTrainer.epoch_indices(ref, epoch)
            np.testing.assert_array_equal(TensorFlowTrainer.epoch_indices(tf_, epoch), order)
            expected = list(theirs.iterate(order, torch.Generator().manual_seed(1)))
            got = list(mine.iterate(order))
            assert [len(y) for _, y in got] == [len(y) for _, y in expected] == [32, 32, 32, 5]
            for (x, y), (ex, ey) in zip(got, expected, strict=True):
                np.testing.assert_array_equal(y, ey.numpy())
                np.testing.assert_allclose(x, ex.numpy().transpose(0, 2, 3, 1), atol=1e-5)


def test_augmentation_is_a_padded_crop_mirrored_half_the_time():
    from mlbench_worker.implementations.tensorflow.data import ImageBatches, epoch_generator

    images = np.random.default_rng(0).integers(1, 256, (256, 3, 32, 32), dtype=np.uint8)
    batches = ImageBatches(images, np.zeros(256), 256, (0, 0, 0), (1 / 255,) * 3, augment=True)
    out = batches.crop_flip(batches.images, epoch_generator(7, 0, 1))
    padded = np.pad(batches.images, ((0, 0), (4, 4), (4, 4), (0, 0)))
    flips = 0
    for i in range(256):
        found = [
            (dy, dx, flip)
            for dy in range(9)
            for dx in range(9)
            for flip in (False, True)
            if np.array_equal(
                out[i],
                padded[i, dy : dy + 32, dx : dx + 32][:, ::-1]
                if flip
                else padded[i, dy : dy + 32, dx : dx + 32],
            )
        ]
        assert found, i
        flips += found[0][2]
    assert 90 < flips < 166  # 1/2 of 256, within 4.7 standard deviations
    again = batches.crop_flip(batches.images, epoch_generator(7, 0, 1))
    np.testing.assert_array_equal(out, again)  # seeded by (seed, epoch, rank)


# --- a run ----------------------------------------------------------------------------------
# The run's time limit follows from its work, not from a quiet machine's clock: it reaches
# the target in its 5th epoch (117 steps a rank, about 125 CPU s on the 2 ranks), 145 s on
# this machine at load 5; in CI, sharing the 2 cores with the other lane's e2e runs, it ran
# at 92 images/s (446 quiet), 45 s an epoch, and its 240 s limit cut it in the 5th. At that
# pace its bound of 8 epochs is about 7 min, so the limit is 9.
@pytest.mark.mpi
@pytest.mark.timeout(900)
def test_two_ranks_reach_the_light_target_and_report_like_the_reference(tmp_path):
    tf_metrics, ref_metrics = tmp_path / "tf" / "m.jsonl", tmp_path / "ref" / "m.jsonl"
    proc = mpirun(
        2,
        ["-c", NO_TORCH_CHECK, *SYNTHETIC, "--target", "light", "--max-epochs", "8",
         "--log-every", "10", "--metrics-file", str(tf_metrics),
         "--checkpoint-dir", str(tmp_path / "checkpoints")],
        timeout=540,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert proc.stdout.count("TORCH_IMPORTED False") == 2, out[-4000:]  # both ranks
    assert "TORCH_IMPORTED True" not in proc.stdout
    tensorflow_rank = "mlbench_worker.implementations.tensorflow.session.TensorFlowRank"
    assert rank_body_entries(proc.stdout) == [tensorflow_rank] * 2  # the one body, each rank
    assert "SYNTHETIC DATA" in proc.stdout and "mlbench result" in proc.stdout
    assert "implementation tensorflow (TensorFlow 2." in proc.stdout
    assert proc.stdout.count("the tensorflow implementation writes no checkpoints") == 1
    assert not any((tmp_path / "checkpoints").iterdir())
    tf_records = [json.loads(line) for line in tf_metrics.read_text().splitlines()]
    (summary,) = [r for r in tf_records if r["type"] == "summary"]  # rank 0 alone reports
    assert summary["implementation"] == "tensorflow" and summary["versions"]["tensorflow"]
    assert "torch" not in summary["versions"]
    assert summary["reached"] and summary["stop_reason"] == "target reached", summary
    assert summary["final_val_accuracy"] >= 0.7 and summary["time_to_target"] > 0
    assert summary["num_workers"] == 2 and summary["dataset"] == "synthetic"
    assert 0 < summary["comm_share"] < 1 and summary["images_per_sec"] > 0
    assert summary["compression_ratio"] == 1.0

    # A reference run of the same options, one epoch: the names it posts (time_to_target
    # only once a target is reached, which the TensorFlow run did), the summary's keys.
    # Neither depends on the training set's size, so its epoch is of 1,280 images (10 steps
    # a rank, as many as --log-every: a logged step) rather than 3,000.
    options = [*SYNTHETIC]
    options[options.index("--train-images") + 1] = "1280"
    reference = mpirun(
        2,
        ["-c", RANK_BODY_SPY, *options, "--implementation", "reference", "--target",
         "light", "--max-epochs", "1", "--log-every", "10", "--metrics-file", str(ref_metrics)],
        timeout=240,
    )  # fmt: skip
    assert reference.returncode == 0, (reference.stdout + reference.stderr)[-4000:]
    reference_rank = "mlbench_worker.training.run.ReferenceRank"
    assert rank_body_entries(reference.stdout) == [reference_rank] * 2
    ref_records = [json.loads(line) for line in ref_metrics.read_text().splitlines()]
    (ref_summary,) = [r for r in ref_records if r["type"] == "summary"]
    names = {r["name"] for r in tf_records if r["type"] == "metric"}
    ref_names = {r["name"] for r in ref_records if r["type"] == "metric"}
    assert names - {"time_to_target"} == ref_names - {"time_to_target"}
    assert "time_to_target" in names
    assert set(summary) == set(ref_summary) | {"implementation_note"}
    assert set(summary["config"]) == set(ref_summary["config"])
    # Both fit the one declared record (what the master checks when a summary arrives).
    # (A metrics file marks its summary line with "type", which is not part of the record.)
    for record in (summary, ref_summary):
        assert result.problems({k: v for k, v in record.items() if k != "type"}) == {}
    ranks = {r["metadata"]["rank"] for r in tf_records if r.get("name") == "rank_time_comm"}
    assert ranks == {0, 1}
    # Each evaluation of either framework writes the whole test set's predicted classes
    # (beside its metrics file); the evaluator grades them as each run reported itself.
    evaluator = Evaluator.of(TestSet("resnet20-cifar10", "synthetic", summary["seed"], 500))
    assert assert_graded_as_reported(tmp_path / "tf" / "predictions", tf_records, evaluator) >= 1
    assert assert_graded_as_reported(tmp_path / "ref" / "predictions", ref_records, evaluator) == 1


# --- what it refuses ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra,named",
    [
        (["--amp"], "--amp: the tensorflow implementation trains in float32 only"),
        (["--channels-last"], "--channels-last: Keras already lays images out"),
        (["--checkpoint-dir", "{tmp}", "--resume"], "--resume: the tensorflow implementation"),
        (["--bucket-mb", "1"], "--bucket-mb: the tensorflow implementation"),
        (["--model", "preact-resnet20"], "--model preact-resnet20: the tensorflow"),
        (["--algorithm-option", "precision=fp16"], "--algorithm-option precision=fp16: the"),
    ],
)
def test_an_option_it_cannot_honour_is_refused_by_name(tmp_path, extra, named):
    argv = [*SYNTHETIC, *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    started = time.monotonic()
    proc = run_worker(argv, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"mlbench-worker: error: {named}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 20  # refused before TensorFlow starts


def test_device_cuda_without_a_gpu_visible_is_refused():
    proc = run_worker([*SYNTHETIC, "--device", "cuda"], timeout=120, CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "mlbench-worker: error: --device cuda: TensorFlow sees no GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_tensorflow_the_worker_says_how_to_install_it(monkeypatch, capsys):
    from mlbench_worker.implementations.tensorflow import run_main
    from mlbench_worker.training.options import parse_args

    args = parse_args(SYNTHETIC)
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` fails
    assert run_main(args) == 2
    assert capsys.readouterr().err.strip() == (
        "mlbench-worker: error: tensorflow is not installed in this worker's Python: "
        "pip install 'mlbench[tensorflow]'"
    )


@pytest.mark.mpi
def test_a_rank_killed_mid_run_ends_mpirun_within_10_s():
    import psutil

    cmd = [
        *launcher_argv(2, mpirun=MPIRUN, tag_output=False, forward=()),
        sys.executable, "-m", "mlbench_worker", *SYNTHETIC, "--log-every", "1",
        "--max-epochs", "3",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=worker_env(OMP_NUM_THREADS="1"),
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # training has started when rank 0 reports a step
            seen.append(line)
            if line.startswith("step "):
                break
        else:
            pytest.fail("no training step before the run ended:\n" + "".join(seen[-40:]))
        ranks = psutil.Process(proc.pid).children(recursive=True)
        (victim,) = [p for p in ranks if p.environ().get("OMPI_COMM_WORLD_RANK") == "1"]
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        rest = proc.stdout.read()
        code = proc.wait(timeout=30)
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, rest[-3000:]
    assert ended - killed < 10, (ended - killed, rest[-3000:])
    assert "mlbench result" not in rest
