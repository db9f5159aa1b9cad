"""Checks under real `mpirun -n 2`: gradient aggregation, replica consistency, a short run."""

import json
import sys

import pytest

from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.test_sets import TestSet

from .helpers import REPO, assert_graded_as_reported, mpi_result, mpirun, run_worker

pytestmark = pytest.mark.mpi


def test_gradients_and_replicas_over_mpi_and_gloo():
    results = mpi_result(
        mpirun(2, [str(REPO / "tests/worker/mpi_checks.py"), "mpi", "gloo"], timeout=240)
    )
    for backend, r in results.items():
        assert r["identical_after_broadcast"], backend
        assert r["grad_close"], (backend, r["grad_max_abs_diff"], r["grad_max_abs"])
        assert r["prescaled_close"], backend
        assert r["grads_are_views"], backend
        assert r["steps"] == 4, backend  # 256 images, 2 ranks, batch 32
        assert r["images"] == 256, backend  # counted from all-reduced sums
        assert r["params_moved"] and r["params_identical_after_steps"], backend
        assert r["buffers_identical_after_eval"] and r["val_identical"], backend


RUN_ARGS = [
    "-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
    "--train-images", "2000", "--test-images", "500", "--batch-size", "50",
    "--lr", "0.05", "--threads", "1", "--log-every", "10",
]  # fmt: skip


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A 2-rank run on a small synthetic set: 1 epoch of 20 steps, then resumed for a second."""
    tmp = tmp_path_factory.mktemp("run")
    metrics = tmp / "out.jsonl"
    common = RUN_ARGS + ["--metrics-file", str(metrics), "--checkpoint-dir", str(tmp / "ckpt")]
    first = mpirun(2, common + ["--max-epochs", "1"], timeout=200)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = mpirun(2, common + ["--max-epochs", "2", "--resume"], timeout=200)
    return first, second, metrics, tmp


def test_short_two_rank_run_learns_and_reports(short_run):
    first, proc, metrics, _ = short_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC DATA" in proc.stdout and "mlbench result" in proc.stdout
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    summaries = [r for r in records if r["type"] == "summary"]
    assert len(summaries) == 2  # one per run: rank 0 alone reports
    s = summaries[-1]
    assert s["dataset"] == "synthetic" and s["num_workers"] == 2 and s["backend"] == "mpi"
    assert s["epochs"] == 2 and s["stop_reason"] == "max epochs done"
    # It learns: twice chance (0.1) after two epochs of 2,000 images, and its training loss
    # falls. The exact figure depends on the machine (the CPU's kernels): 0.222 every time
    # on the AMD EPYC of 2026-12-02, above 0.3 where this test passed before.
    assert s["final_val_accuracy"] > 0.2, s
    assert 0 <= s["comm_share"] < 1 and s["images_per_sec"] > 0
    assert set(s["versions"]) == {"python", "torch", "mpi", "mlbench"}
    points = [r for r in records if r["type"] == "metric"]
    names = {p["name"] for p in points}
    losses = [p["value"] for p in points if p["name"] == "train_loss"]
    assert losses[-1] < losses[0], losses
    assert {"train_loss", "train_accuracy", "learning_rate", "images_per_sec", "time_data",
            "time_compute", "time_comm", "val_loss", "val_accuracy", "epoch",
            "rank_time_comm"} <= names  # fmt: skip
    assert len({p["uid"] for p in points}) == len(points)
    assert all({"epoch", "step", "elapsed"} <= set(p["metadata"]) for p in points)
    # Progress series come with every report: fractional epochs, the benchmark clock.
    epochs = [p["value"] for p in points if p["name"] == "epoch"]
    assert epochs == sorted(epochs) and 0 < epochs[0] < 1.0 and {1.0, 2.0} <= set(epochs)
    elapsed = [p["value"] for p in points if p["name"] == "elapsed"]
    assert len(elapsed) == len(epochs) and elapsed == sorted(elapsed) and elapsed[0] > 0
    assert {p["metadata"]["rank"] for p in points if p["name"] == "rank_time_comm"} == {0, 1}


def test_each_evaluation_writes_the_whole_test_set_graded_as_reported(short_run):
    """Rank 0 gathers both ranks' halves into the test set's order at every evaluation (one
    per epoch, the resumed run's too) beside the metrics file; the evaluator, from the seed
    alone, grades each file exactly as the run reported its own accuracy."""
    *_, metrics, tmp = short_run
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    seed = next(r for r in records if r["type"] == "summary")["seed"]
    evaluator = Evaluator.of(TestSet("resnet20-cifar10", "synthetic", seed, 500))
    assert assert_graded_as_reported(tmp / "predictions", records, evaluator) == 2


def test_resume_continues_from_the_checkpoint(short_run):
    first, second, metrics, _ = short_run
    assert "resumed from" in second.stdout and "1 epochs done" in second.stdout
    summaries = [json.loads(x) for x in metrics.read_text().splitlines() if '"summary"' in x]
    assert summaries[0]["epochs"] == 1 and summaries[1]["epochs"] == 2
    # The benchmark clock carries on from where the first run stopped.
    assert summaries[1]["elapsed"] > summaries[0]["elapsed"]


def test_resume_with_another_world_size_is_refused(short_run):
    *_, tmp = short_run
    proc = run_worker(
        [
            "resnet20-cifar10",
            "--dataset",
            "synthetic",
            "--train-images",
            "2000",
            "--test-images",
            "500",
            "--batch-size",
            "50",
            "--checkpoint-dir",
            str(tmp / "ckpt"),
            "--resume",
        ]  # fmt: skip
    )
    assert proc.returncode != 0
    assert "written by a run with 2 workers, this run has 1" in proc.stderr
    assert "Traceback" not in proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
