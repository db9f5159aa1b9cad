"""`mlbench evaluate RUN` for a task-3 run: the run's stored final model is graded again in
the client's own process, over the stream it regenerates from the run's summary, and set
beside the master's grade and the run's own perplexity. Over a live web server, the model
posted as a worker posts it."""

from __future__ import annotations

import json

import pytest

from mlbench_master.api.models import Metric, Run
from mlbench_master.grading import model_files
from mlbench_worker.client.cli import main
from mlbench_worker.tasks.wikitext2.export import onnx_bytes
from tests.api.test_perplexity_audit_api import SEED, STEP, TASK, TOKENS, VOCAB, gpt, own_perplexity
from tests.client.test_evaluate_model_cli import _audited, _cli, _post

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _own_home(settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_DATA_DIR = "/nonexistent"


def _run(claimed: float) -> Run:
    model = gpt()
    run = Run.objects.create(
        name="lm", state=Run.STARTED, task=TASK, seed=SEED, num_workers=1, test_examples=TOKENS,
        summary={"num_workers": 1, "seed": SEED,
                 "config": {"valid_tokens": TOKENS, "vocab": VOCAB, "block": model.block}},
    )  # fmt: skip
    Metric.objects.create(run=run, name="val_perplexity", value=claimed, metadata={"step": STEP})
    return run


def test_evaluate_grades_the_language_model_here_like_the_master(live_server, capsys):
    model = gpt()
    run = _run(own_perplexity(model))
    assert _post(live_server, run, "model", onnx_bytes(model)).status_code == 202
    assert _audited(run)["status"] == "matches"
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert f"its final model, step {STEP}, {TOKENS - 1} tokens of synthetic" in out
    assert "graded here" in out and "master's grade" in out
    assert "the grade equals the master's and the run's own perplexity (matches)" in out
    assert main(_cli(live_server, "show", str(run.pk))) == 0
    shown = capsys.readouterr().out
    assert f"matches: the final model's perplexity {own_perplexity(model):.4g} over 700" in shown

    # A master whose stored grade is not what the model gives is caught here.
    path = model_files.folder(run.pk) / model_files.AUDIT
    record = json.loads(path.read_text())
    record["graded"]["loss"] *= 0.9
    path.write_text(json.dumps(record))
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert "DISAGREES with the master's grade" in capsys.readouterr().out


def test_evaluate_fails_a_run_whose_model_does_not_give_its_perplexity(live_server, capsys):
    model = gpt()
    run = _run(own_perplexity(model) * 0.8)
    assert _post(live_server, run, "model", onnx_bytes(model)).status_code == 202
    assert _audited(run)["status"] == "mismatch"
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert "does NOT give the perplexity the run reported" in capsys.readouterr().out


def test_evaluate_says_when_a_language_model_run_has_no_model(live_server, capsys):
    run = _run(50.0)
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert (
        f"run {run.pk} has no model stored: a language model is graded" in capsys.readouterr().err
    )


def test_evaluate_waits_for_a_pending_grade_and_grades_where_the_master_could_not(
    live_server, capsys
):
    model = gpt()
    run = _run(own_perplexity(model))
    assert _post(live_server, run, "model", onnx_bytes(model)).status_code == 202
    assert _audited(run)["status"] == "matches"
    path = model_files.folder(run.pk) / model_files.AUDIT
    done = json.loads(path.read_text())
    path.write_text(json.dumps(done | {"status": "pending", "grader": model_files.grader()}))
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert "the master is still grading" in capsys.readouterr().err
    # The master had no archive, say: no grade of its own; the one here decides.
    unable = {k: v for k, v in done.items() if k != "graded"}
    path.write_text(json.dumps(unable | {"status": "not audited", "why": "no archive"}))
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert "the master has no grade of this model (not audited: no archive)" in out
    assert "the model gives the perplexity the run reported; the master did not grade it" in out
