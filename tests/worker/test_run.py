"""A whole single-process run: `auto` falling back to synthetic data, stopped by a time budget,
reporting to a master (a recording server on loopback) and to a metrics file, evaluating
under --amp (bfloat16 on the CPU) and handing over its final model for the audit."""

import json

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import audit_process, predictions, test_sets

from .helpers import run_worker
from .recording_master import RecordingMaster

# Small, because --amp computes in bfloat16, which CPUs without native bf16 (this project's
# 2-core machines) emulate at about a tenth of float32's speed: one training step of 128
# images cost 13 s of CPU there and the final evaluation 7 s per 100 images. One step of
# 32 images still overruns the 1 s budget mid-epoch, and the audit compares each of the 64
# test images the run predicted.
TEST_IMAGES = 64


def test_auto_falls_back_loudly_and_time_budget_stops_mid_epoch(tmp_path):
    metrics = tmp_path / "m.jsonl"
    master = RecordingMaster()
    try:
        proc = _run(tmp_path, metrics, master.url)
    finally:
        master.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC DATA" in proc.stdout and "CIFAR-10 could not be had" in proc.stdout
    assert "synthetic (generated; NOT the cifar10 data set)" in proc.stdout
    summary = next(json.loads(x) for x in metrics.read_text().splitlines() if '"summary"' in x)
    assert summary["dataset"] == "synthetic" and "Could not download" in summary["dataset_note"]
    assert summary["stop_reason"] == "time budget spent"
    assert 0 < summary["epochs"] < 1  # 160 steps per epoch; a 1 s budget ends it early
    assert summary["final_val_accuracy"] is not None  # the final model is always evaluated
    assert summary["elapsed"] >= 1
    # The final evaluation's predictions: in predictions/ beside the metrics file, and the
    # same bytes posted to the master with the run's token and the data set it used.
    (kept,) = predictions.files_in(tmp_path / "predictions")
    (posted,) = master.posted("predictions")
    assert posted.body == kept.read_bytes()
    assert (posted.path, posted.query) == ("/api/runs/7/predictions/", {"dataset": "synthetic"})
    assert posted.headers["Authorization"] == "Token tok-7"
    assert posted.headers["Content-Type"] == "application/octet-stream"
    assert len(predictions.read(kept).arrays[predictions.CLASS]) == TEST_IMAGES
    assert master.posted("summary") and master.posted("metrics")
    # The final model, beside the predictions and posted after them, with the step it was
    # evaluated at and the evaluation's precision (--amp: bf16). The evaluator, run as the
    # master runs it, finds it made the predictions within bf16's tolerance.
    (model,) = master.posted("model")
    step = str(predictions.read(kept).step)
    assert model.query == {"dataset": "synthetic", "step": step, "precision": "bf16"}
    assert model.body == (tmp_path / "model.onnx").read_bytes()
    test_set = test_sets.TestSet(
        "resnet20-cifar10", "synthetic", catalogue.DEFAULT_SEED, TEST_IMAGES
    )
    request = audit_process.request_of(
        test_set, mode="audit", model=tmp_path / "model.onnx", predictions=kept, sample=TEST_IMAGES,
        sample_seed=0, precision="bf16",
    )  # fmt: skip
    result = audit_process.run(request, audit_process.Limits())["result"]
    assert (result["status"], result["examples"], result["differ"]) == ("matches", TEST_IMAGES, 0)


def _run(tmp_path, metrics, master_url):
    return run_worker(
        [
            "resnet20-cifar10",
            "--dataset",
            "auto",
            "--data-dir",
            str(tmp_path / "data"),
            "--train-images",
            "5120",
            "--test-images",
            str(TEST_IMAGES),
            "--batch-size",
            "32",
            "--time-budget",
            "1",
            "--threads",
            "1",
            "--amp",
            "--metrics-file",
            str(metrics),
            "--master-url",
            master_url,
            "--run-id",
            "7",
        ],  # fmt: skip
        MLBENCH_CIFAR10_URL="http://127.0.0.1:9/cifar-10-python.tar.gz",
        MLBENCH_RUN_TOKEN="tok-7",
        timeout=180,
    )
