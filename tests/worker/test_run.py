"""A whole single-process run: `auto` falling back to synthetic data, stopped by a time budget."""

import json

from .helpers import run_worker


def test_auto_falls_back_loudly_and_time_budget_stops_mid_epoch(tmp_path):
    metrics = tmp_path / "m.jsonl"
    proc = run_worker(
        [
            "resnet20-cifar10",
            "--dataset",
            "auto",
            "--data-dir",
            str(tmp_path / "data"),
            "--train-images",
            "5120",
            "--test-images",
            "200",
            "--time-budget",
            "1",
            "--threads",
            "1",
            "--metrics-file",
            str(metrics),
        ],  # fmt: skip
        MLBENCH_CIFAR10_URL="http://127.0.0.1:9/cifar-10-python.tar.gz",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC DATA" in proc.stdout and "CIFAR-10 could not be had" in proc.stdout
    assert "synthetic (generated; NOT the cifar10 data set)" in proc.stdout
    summary = next(json.loads(x) for x in metrics.read_text().splitlines() if '"summary"' in x)
    assert summary["dataset"] == "synthetic" and "Could not download" in summary["dataset_note"]
    assert summary["stop_reason"] == "time budget spent"
    assert 0 < summary["epochs"] < 1  # 40 steps per epoch; a 1 s budget ends it early
    assert summary["final_val_accuracy"] is not None  # the final model is always evaluated
    assert summary["elapsed"] >= 1
