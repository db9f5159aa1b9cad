"""A real task-1b run with `--lr-schedule poly`, stored as the master stores a run (its
metric points and summary posted through the API), gives an MLPerf log that MLCommons'
checker reads with MLPerf's closed ResNet rules: every key those rules require is there,
with the values they demand. The one rule a seconds-long run on synthetic images cannot
meet is MLPerf's quality target (an evaluation at 75.9% or more): the checker must name
that rule and no other."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.results import mllog
from tests.worker.helpers import run_worker
from tests.worker.test_lr_schedules import mlperf_poly

from .test_mllog_checker import check

pytestmark = pytest.mark.django_db

PEAK_LR = 0.05  # MLPerf's rules want a base rate that is a multiple of 0.001
# 2 training images, batch 2: one step an epoch, 5 of warm-up and 2 of decay. What the rules
# check is the schedule, not the batch, and the images are loaded in the rank's own process
# (--data-workers 0): a loader process started for each of the 14 passes cost about 2 s
# each, more than the step.
EPOCHS = 7


@pytest.fixture(scope="module")
def worker_run(tmp_path_factory):
    """The worker's records and when it was started (as the master records started_at)."""
    tmp = tmp_path_factory.mktemp("poly")
    metrics = tmp / "m.jsonl"
    started = timezone.now()
    proc = run_worker(
        ["resnet50-imagenet", "--dataset", "synthetic", "--data-dir", str(tmp / "data"),
         "--train-images", "2", "--test-images", "8", "--batch-size", "2", "--crop", "64",
         "--threads", "1", "--data-workers", "0", "--log-every", "1", "--seed", "3",
         "--max-epochs", str(EPOCHS), "--lr", str(PEAK_LR), "--lr-schedule", "poly",
         "--metrics-file", str(metrics)],
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return records, started


def _store(staff_api, records: list[dict], started) -> Run:
    summary = next(r for r in records if r["type"] == "summary")
    run = Run.objects.create(
        name="poly",
        seed=summary["seed"],
        num_workers=summary["num_workers"],
        task="resnet50-imagenet",
        target="standard",
        state=Run.FINISHED,
        dataset="synthetic",
        dataset_used=summary["dataset"],
        started_at=started,
    )
    points = [
        {**{k: v for k, v in r.items() if k != "type"}, "run_id": run.pk}
        for r in records
        if r["type"] == "metric"
    ]
    response = staff_api.post("/api/metrics/", points, format="json")
    assert response.status_code == 201, response.content
    body = {k: v for k, v in summary.items() if k != "type"}
    response = staff_api.post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert response.status_code == 200, response.content
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    run.refresh_from_db()
    return run


def _events(text: str) -> dict[str, object]:
    lines = [json.loads(x.removeprefix(":::MLLOG ")) for x in text.splitlines()]
    return {e["key"]: e["value"] for e in lines}


def test_a_poly_run_logs_what_mlperfs_closed_resnet_rules_require(worker_run, staff_api, tmp_path):
    records, started = worker_run
    summary = next(r for r in records if r["type"] == "summary")
    config = summary["config"]
    assert (config["lr_schedule"], config["momentum"], config["weight_decay"]) == (
        "poly",
        0.9,
        1e-4,
    )
    assert (config["end_lr"], config["poly_power"], config["decay_steps"]) == (1e-4, 2.0, 3)
    # The worker trained with MLPerf's formula: the rate it reported at each step.
    rates = [r["value"] for r in records if r.get("name") == "learning_rate"]
    expected = [mlperf_poly(i, PEAK_LR, 1e-4, 5, EPOCHS) for i in range(EPOCHS)]
    assert rates == pytest.approx(expected, rel=1e-6)

    text = mllog.run_log(_store(staff_api, records, started))
    events = _events(text)
    assert events["submission_benchmark"] == "resnet" and events["opt_name"] == "sgd"
    assert events["sgd_opt_base_learning_rate"] == PEAK_LR
    assert events["sgd_opt_end_learning_rate"] == 1e-4
    assert events["sgd_opt_learning_rate_decay_poly_power"] == 2.0
    assert events["sgd_opt_learning_rate_decay_steps"] == 3
    assert (events["sgd_opt_momentum"], events["sgd_opt_weight_decay"]) == (0.9, 1e-4)
    assert events["opt_learning_rate_warmup_epochs"] == 5

    result = check("resnet50-imagenet", text, tmp_path)
    assert "training_4.0.0/closed_resnet.yaml" in result.stderr
    assert "closed_resnet_sgd.yaml" in result.stderr  # the SGD rules were applied too
    best = max(r["value"] for r in records if r.get("name") == "val_accuracy")
    assert best < 0.759  # seconds of training on 2 synthetic images: the target is out of reach
    assert result.returncode == 1
    # The checker's complaints (WARNING lines), then its verdict: only the quality target.
    complaints = [x for x in result.stderr.splitlines() if x.startswith("WARNING")]
    assert complaints == [
        "WARNING -  Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0"
    ], result.stderr
    assert result.stderr.rstrip().endswith("ERROR - FAILED")
