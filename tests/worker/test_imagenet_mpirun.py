"""Task 1b under real `mpirun -n 2`: ResNet-50 on a few dozen synthetic JPEG files, small crops;
its predictions graded as reported and its exported model audited as making them."""

import json

import pytest

from mlbench_worker.shared.evaluation import audit_process, predictions
from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.test_sets import TestSet

from .helpers import assert_graded_as_reported, mpirun

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imagenet")
    metrics = tmp / "out.jsonl"
    common = [
        "-m", "mlbench_worker", "resnet50-imagenet", "--dataset", "synthetic",
        "--data-dir", str(tmp / "data"), "--train-images", "48", "--test-images", "24",
        "--batch-size", "8", "--crop", "64", "--threads", "1", "--data-workers", "1",
        "--log-every", "1", "--label-smoothing", "0.1", "--metrics-file", str(metrics),
        "--checkpoint-dir", str(tmp / "ckpt"),
    ]  # fmt: skip
    first = mpirun(2, [*common, "--max-epochs", "1"], timeout=200)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = mpirun(2, [*common, "--max-epochs", "2", "--resume"], timeout=200)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return first, second, records, tmp


def test_two_ranks_train_resnet50_on_synthetic_jpegs_labelled_as_such(two_ranks):
    proc, _, records, tmp = two_ranks
    assert "SYNTHETIC DATA: this run does not train on ImageNet" in proc.stdout
    assert "SMOKE TEST: 64-pixel crops" in proc.stdout
    assert "synthetic (generated; NOT the imagenet data set)" in proc.stdout
    s = next(r for r in records if r["type"] == "summary")
    assert s["task"] == "resnet50-imagenet" and s["model"] == "resnet50"
    assert s["dataset"] == "synthetic" and s["num_workers"] == 2 and s["epochs"] == 1
    c = s["config"]
    assert (c["crop"], c["eval_resize"], c["smoke_test_crop"]) == (64, 73, True)
    assert (c["train_images"], c["test_images"], c["label_smoothing"]) == (48, 24, 0.1)
    assert c["zero_init_residual"] is True and c["lr_schedule"] == "step"
    # What the MLPerf log states: the SGD settings and the step schedule's own parameters.
    assert (c["momentum"], c["weight_decay"]) == (0.9, 1e-4)
    assert (c["decay_epochs"], c["decay_factor"]) == ([30, 60, 80], 0.1)
    assert 0 <= s["final_val_accuracy"] <= s["final_val_top5_accuracy"] <= 1
    # The files were written once into the data directory and read from there.
    assert len(list((tmp / "data" / "imagenet-synthetic" / "train").rglob("*.JPEG"))) == 48


def test_each_rank_trains_on_its_own_half(two_ranks):
    _, _, records, _ = two_ranks
    first_run = records[: next(i for i, r in enumerate(records) if r["type"] == "summary")]
    steps = [r["metadata"]["step"] for r in first_run if r.get("name") == "train_loss"]
    # 48 images, 2 ranks, 8 per step: 3 steps per epoch, so each rank saw 24 images.
    assert steps == [1, 2, 3]
    top5 = [r for r in first_run if r.get("name") == "val_top5_accuracy"]
    top1 = [r for r in first_run if r.get("name") == "val_accuracy"]
    assert len(top5) == len(top1) == 1 and top5[0]["metadata"] == top1[0]["metadata"]


def test_predictions_with_their_top5_grade_as_reported(two_ranks):
    """Each evaluation (the resumed run's too) writes the 24 images' classes and five best
    classes, in the validation set's order; the evaluator's top-1 and top-5 are the run's."""
    _, _, records, tmp = two_ranks
    seed = next(r for r in records if r["type"] == "summary")["seed"]
    evaluator = Evaluator.of(TestSet("resnet50-imagenet", "synthetic", seed, 24))
    assert evaluator.top5
    assert assert_graded_as_reported(tmp / "predictions", records, evaluator) == 2


def test_the_exported_resnet50_is_audited_as_making_the_last_predictions(two_ranks):
    """Rank 0 exports the final ResNet-50 behind the run's normalisation, its 64-pixel crop
    fixed in the input; the evaluator, run as the master runs it (a bounded child process),
    makes the 24 synthetic images itself at that crop and finds the model gives the
    resumed run's last predictions."""
    _, _, records, tmp = two_ranks
    seed = next(r for r in records if r["type"] == "summary")["seed"]
    model = tmp / "model.onnx"
    assert model.stat().st_size > 90e6  # ResNet-50 in float32, in one file
    last = predictions.files_in(tmp / "predictions")[-1]
    request = audit_process.request_of(
        TestSet("resnet50-imagenet", "synthetic", seed, 24), mode="audit", model=model,
        predictions=last, sample=24, sample_seed=0, precision="fp32",
    )  # fmt: skip
    result = audit_process.run(request, audit_process.Limits())["result"]
    assert (result["status"], result["examples"], result["differ"]) == ("matches", 24, 0), result
    assert result["step"] == predictions.read(last).step


def test_resume_continues_with_the_learning_rate_schedule(two_ranks):
    _, second, records, _ = two_ranks
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout and "1 epochs done" in second.stdout
    summaries = [r for r in records if r["type"] == "summary"]
    assert [s["epochs"] for s in summaries] == [1, 2]
    rates = [r["value"] for r in records if r.get("name") == "learning_rate"]
    # Warm-up over 5 epochs of 3 steps, from 0.1 x 8/256 towards 2 x that: still rising.
    assert rates == sorted(rates) and rates[0] == pytest.approx(0.1 * 8 / 256)
    assert len(rates) == 6
