"""The torch-ddp implementation against the reference loop, on real ranks through the worker.

Same seed, same data, same schedule: after 20 steps on 2 ranks (gloo) the two hold the same
parameters to float tolerance (only who averaged the gradients differs), and the summary
says which implementation ran and what it sent. What torch-ddp cannot do is refused with a
message naming the option. The reference run is made once for the module (`reference`):
the comparison and the refused resume both start from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlbench_worker.models import build_model
from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.test_sets import TestSet

from .helpers import (
    RANK_BODY_SPY,
    assert_graded_as_reported,
    metrics_file,
    mpirun,
    points,
    rank_body_entries,
    run_worker,
)

STEPS = 20
BATCH = 32
# Through the rank body's spy (helpers.RANK_BODY_SPY): `python -m mlbench_worker` otherwise.
RUN = ["-c", RANK_BODY_SPY, "resnet20-cifar10", "--dataset", "synthetic", "--backend", "gloo",
       "--train-images", str(STEPS * BATCH * 2), "--test-images", "100", "--max-epochs", "1",
       "--batch-size", str(BATCH), "--threads", "1", "--log-every", "1"]  # fmt: skip


def _train(tmp_path: Path, implementation: str) -> tuple[dict, list[dict], dict]:
    """A 20-step run of `implementation` under tmp_path/IMPLEMENTATION (its checkpoint in
    ckpt/, metrics in m.jsonl, predictions beside them): (summary, metric points, the
    checkpoint's state)."""
    where = tmp_path / implementation
    proc = mpirun(
        2,
        [*RUN, "--implementation", implementation, "--checkpoint-dir", str(where / "ckpt"),
         "--data-dir", str(tmp_path / "data"), "--metrics-file", str(where / "m.jsonl")],
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Both implementations are the reference loop's parts of the one rank body, once a rank.
    assert rank_body_entries(proc.stdout) == ["mlbench_worker.training.run.ReferenceRank"] * 2
    summary, metrics = metrics_file(where / "m.jsonl")
    state = torch.load(where / "ckpt" / "checkpoint.pt", weights_only=True)
    return summary, metrics, state


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, tuple[dict, list[dict], dict]]:
    """The reference's 20-step run, made once: (its folder's parent, what `_train` returns)."""
    base = tmp_path_factory.mktemp("ddp")
    return base, _train(base, "reference")


@pytest.mark.mpi
def test_ddp_and_the_reference_hold_the_same_parameters_after_20_steps(tmp_path, reference):
    ref_base, (ref_summary, ref_metrics, ref) = reference
    ddp_summary, ddp_metrics, ddp = _train(tmp_path, "torch-ddp")
    assert ref["progress"]["step"] == ddp["progress"]["step"] == STEPS

    names = [n for n, _ in build_model("resnet20").named_parameters()]
    worst = max((ref["model"][n] - ddp["model"][n]).abs().max().item() for n in names)
    moved = max((ref["model"][n] - _initial()[n]).abs().max().item() for n in names)
    assert moved > 1e-2  # the parameters did train
    assert worst <= 1e-5, f"parameters differ by up to {worst}"
    # The same losses step by step (they are computed before the exchange).
    assert points(ref_metrics, "train_loss") == pytest.approx(
        points(ddp_metrics, "train_loss"), rel=1e-5
    )

    assert ref_summary["implementation"] == "reference"
    assert ddp_summary["implementation"] == "torch-ddp"
    assert ddp_summary["algorithm"] == "allreduce" and ddp_summary["backend"] == "gloo"
    # DDP all-reduces every gradient in fp32 each step: the reference's bytes, ratio 1.
    assert ddp_summary["comm_bytes_per_step"] == ref_summary["comm_bytes_per_step"]
    assert ddp_summary["compression_ratio"] == 1.0
    # The exposed communication DDP waited for inside backward is booked as communication.
    assert all(t > 0 for t in points(ddp_metrics, "time_comm"))
    assert ddp["identity"]["implementation"] == "torch-ddp"
    # Both write their predictions of the whole test set, which grade as they reported.
    evaluator = Evaluator.of(TestSet("resnet20-cifar10", "synthetic", ref_summary["seed"], 100))
    for where, metrics in (
        (ref_base / "reference", ref_metrics),
        (tmp_path / "torch-ddp", ddp_metrics),
    ):
        assert assert_graded_as_reported(where / "predictions", metrics, evaluator) == 1


def _initial() -> dict:
    torch.manual_seed(1)  # the worker's default --seed
    return build_model("resnet20").state_dict()


@pytest.mark.mpi
def test_a_reference_checkpoint_is_not_continued_by_ddp(tmp_path, reference):
    ref_base, _ = reference
    proc = mpirun(
        2,
        [*RUN, "--implementation", "torch-ddp", "--checkpoint-dir", str(tmp_path / "next"),
         "--resume-from", str(ref_base / "reference" / "ckpt"),
         "--data-dir", str(tmp_path / "data")],
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "implementation 'reference', this run uses 'torch-ddp'" in proc.stderr


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--backend", "mpi"], "--implementation torch-ddp runs on --backend gloo or nccl"),
        (["--algorithm", "powersgd"], "implementation torch-ddp runs algorithm allreduce only"),
        (["--no-overlap"], "always overlaps its all-reduce"),
    ],
)
def test_what_ddp_cannot_do_is_refused(flags, message, tmp_path):
    proc = run_worker(
        ["resnet20-cifar10", "--implementation", "torch-ddp", "--dataset", "synthetic",
         "--train-images", "64", "--test-images", "32", "--max-epochs", "1",
         "--data-dir", str(tmp_path), *flags]
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_task_without_ddp_refuses_it():
    proc = run_worker(["logreg-epsilon", "--implementation", "torch-ddp"])
    assert proc.returncode == 2
    assert "logreg-epsilon has no implementation 'torch-ddp'; choose one of: reference" in (
        proc.stderr
    )
