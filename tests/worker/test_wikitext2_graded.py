"""A task-3 worker run graded from its model: the evaluator, given only what the run records
(its summary: task, workers, data set, seed, `valid_tokens`, `vocab`, and the evaluation's
geometry) and its final model (the checkpoint of its last epoch, exported by
tasks/wikitext2/export.py), finds the run's own last `val_perplexity` and `val_accuracy`;
and so does the bounded child process the master grades in (audit_process.py), given the
``model.onnx`` the run itself exported beside its metrics after its summary.

One process here (no mpirun); test_wikitext2_mpirun.py grades its 2-rank runs the same way.
The run's tokens come from its own data code, the evaluator's from token_streams.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlbench_worker.models import build_language_model
from mlbench_worker.shared.evaluation import audit_process, perplexity
from mlbench_worker.tasks.wikitext2.export import onnx_bytes

from .helpers import metrics_file, points, run_worker

# The run sums float32 cross-entropies per window (LSTM) or batch of blocks (GPT) into
# float64, the evaluator float64 log-sum-exps of float32 logits (perplexity.py).
LOSS_TOLERANCE = 1e-5  # of the mean loss
ACCURACY_TOLERANCE = 2  # positions: a near tie float32 rounding may rank otherwise


def grade_run(metrics: Path, checkpoint: Path) -> None:
    """Assert that the evaluator's grade of the run's final model equals its last report."""
    summary, records = metrics_file(metrics)
    config = summary["config"]
    assert not points(records, "averaging_started")  # the checkpoint holds the raw weights
    model = build_language_model(summary["model"], config["vocab"])
    model.load_state_dict(torch.load(checkpoint, weights_only=False)["model"])
    graded = perplexity.grade(
        onnx_bytes(model), task=summary["task"], workers=summary["num_workers"],
        dataset=summary["dataset"], seed=summary["seed"], config=config,
    )  # fmt: skip
    geometry = perplexity.Geometry.of_run(summary["task"], summary["num_workers"], config)
    loss, ppl, accuracy = (
        points(records, m)[-1] for m in ("val_loss", "val_perplexity", "val_accuracy")
    )
    assert graded.whole and abs(graded.loss - loss) <= LOSS_TOLERANCE * loss, (graded, loss)
    assert graded.perplexity == pytest.approx(ppl, rel=2 * LOSS_TOLERANCE * loss)
    assert abs(graded.accuracy - accuracy) * graded.tokens <= ACCURACY_TOLERANCE
    assert graded.tokens == geometry.positions(config["valid_tokens"])


@pytest.mark.parametrize(("task", "model"), [("awd-lstm-wikitext2", "awd-lstm-tiny"),
                                             ("gpt-wikitext2", "gpt-tiny")])  # fmt: skip
def test_a_runs_own_perplexity_is_found_again_from_its_model_and_its_record(tmp_path, task, model):
    proc = run_worker([
        task, "--model", model, "--dataset", "synthetic", "--vocab-size", "120",
        "--train-tokens", "6000", "--test-tokens", "2011", "--batch-size", "8",
        "--max-epochs", "1", "--threads", "1", "--seed", "5", "--data-dir", str(tmp_path),
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--metrics-file", str(tmp_path / "m.jsonl"),
    ])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = metrics_file(tmp_path / "m.jsonl")
    if task.startswith("awd"):
        assert summary["config"]["eval_columns"] == 10 and summary["config"]["bptt"] == 70
    grade_run(tmp_path / "m.jsonl", tmp_path / "ckpt" / "checkpoint.pt")
    # The model the run exported itself (what its worker posts to the master), graded in
    # the master's bounded child process from the same record.
    summary, records = metrics_file(tmp_path / "m.jsonl")
    record = perplexity.run_record(task, summary, -1, -1, summary["dataset"], "")
    assert record is not None and record["seed"] == 5 and record["workers"] == 1
    request = audit_process.request_of(
        None, mode="audit", model=tmp_path / "model.onnx", run=record, probe_seed=11
    )
    answer = audit_process.run(request, audit_process.Limits(seconds=120))
    loss = points(records, "val_loss")[-1]
    assert abs(answer["score"]["loss"] - loss) <= LOSS_TOLERANCE * loss, answer
    assert answer["score"]["whole"]
    checked = audit_process.run(request | {"mode": "check"}, audit_process.Limits(seconds=120))
    assert set(checked) == {"sha256"}, checked
    wrong = record | {"config": summary["config"] | {"vocab": 121}}
    refused = audit_process.run(request | {"run": wrong}, audit_process.Limits(seconds=120))
    assert "the stream's vocabulary has 121" in refused["refused"], refused
