"""POST /api/runs/<id>/model/ for a task-3 run: the master checks the language model against
the run's vocabulary, stores it, and grades its perplexity in the background over the
validation stream it regenerates from the run's summary, then compares it with the run's
own `val_perplexity` of that step (mlbench_master/grading/perplexity_audit.py). The run's number
here is computed by this test with plain torch, as the task's evaluation computes it (one
worker: blocks of the model's context, the last one shorter)."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from mlbench_master.grading import model_auditing, model_files
from mlbench_worker.models import build_language_model
from mlbench_worker.shared import wikitext2_synthetic
from mlbench_worker.tasks.wikitext2.export import onnx_bytes
from tests.api.conftest import worker_client
from tests.api.test_model_audit_api import audited, post_model

pytestmark = pytest.mark.django_db

TASK, VOCAB, SEED, TOKENS, STEP = "gpt-wikitext2", 60, 9, 701, 40


@pytest.fixture(autouse=True)
def _data(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"


def gpt(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_language_model("gpt-tiny", VOCAB).eval()


def own_perplexity(model: torch.nn.Module) -> float:
    """The run's evaluation of `model` on one worker, in torch: every token of the stream
    but the last predicted from the tokens before it in its block of `model.block`."""
    tokens = torch.from_numpy(wikitext2_synthetic.stream(SEED, "valid", TOKENS, VOCAB))
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, TOKENS - 1, model.block):
            x = tokens[start : min(start + model.block, TOKENS - 1)]
            y = tokens[start + 1 : start + 1 + x.numel()]
            total += float(F.cross_entropy(model(x[None])[0], y, reduction="sum"))
            count += y.numel()
    return math.exp(total / count)


@pytest.fixture
def lm_run(make_run):
    block = build_language_model("gpt-tiny", VOCAB).block
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, num_workers=1, test_examples=TOKENS)
    run.summary = {
        "task": TASK, "num_workers": 1, "seed": SEED, "dataset": "synthetic", "device": "cpu",
        "config": {"valid_tokens": TOKENS, "vocab": VOCAB, "block": block},
    }  # fmt: skip
    run.save()
    return run


def report(run: Run, perplexity: float, step: int = STEP) -> None:
    Metric.objects.create(
        run=run, name="val_perplexity", value=perplexity, metadata={"step": step, "elapsed": 1.0}
    )


def test_an_honest_language_model_matches_its_runs_perplexity(lm_run, api):
    model = gpt()
    report(lm_run, own_perplexity(model))
    body = onnx_bytes(model)
    r = post_model(worker_client(lm_run), lm_run, body, f"dataset=synthetic&step={STEP}")
    assert r.status_code == 202, r.json()
    assert (r.json()["status"], r.json()["kind"], r.json()["step"]) == (
        "pending",
        "perplexity",
        STEP,
    )
    result = audited(lm_run)
    assert result["status"] == "matches", result.get("why")
    assert result["graded"]["whole"] and result["graded"]["tokens"] == TOKENS - 1
    assert result["graded"]["perplexity"] == pytest.approx(result["reported_perplexity"], rel=1e-5)
    assert result["difference"] <= result["tolerance"] == 1e-5
    assert result["probe_seed"] == r.json()["probe_seed"]
    shown = api.get(f"/api/runs/{lm_run.pk}/").json()["evaluation"]["audit"]
    assert shown["status"] == "matches" and shown["model_bytes"] == len(body)


def test_a_perplexity_the_model_does_not_give_is_a_mismatch_with_both_numbers(lm_run):
    model = gpt()
    honest = own_perplexity(model)
    report(lm_run, honest * 0.9)  # the run claimed 10 % better than its model gives
    assert post_model(worker_client(lm_run), lm_run, onnx_bytes(model)).status_code == 202
    result = audited(lm_run)  # no step named: the last reported
    assert result["status"] == "mismatch" and result["step"] == STEP, result
    assert result["graded"]["perplexity"] == pytest.approx(honest, rel=1e-5)
    assert result["reported_perplexity"] == pytest.approx(honest * 0.9)


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_claim_10_percent_better_is_a_mismatch_at_every_precision_offered(make_run, precision):
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, num_workers=1, test_examples=TOKENS)
    run.summary = {"num_workers": 1, "device": "cuda:0" if precision == "tf32" else "cpu",
                   "config": {"valid_tokens": TOKENS, "vocab": VOCAB, "block": gpt().block}}  # fmt: skip
    run.save()
    report(run, own_perplexity(gpt()) * 0.9)
    r = post_model(
        worker_client(run), run, onnx_bytes(gpt()), f"dataset=synthetic&precision={precision}"
    )
    assert r.status_code == 202, r.json()
    result = audited(run)
    assert result["status"] == "mismatch" and result["precision"] == precision, result
    assert result["tolerance"] < result["difference"] < 0.03


def test_a_grade_over_its_time_limit_is_not_audited_and_names_the_setting(lm_run, settings):
    """A stream of three million tokens (the run's record says so) takes the tiny model well
    over the one second allowed here."""
    settings.MLBENCH_PERPLEXITY_TIMEOUT = 1
    lm_run.summary["config"]["valid_tokens"] = 3_000_000
    lm_run.test_examples = 3_000_000  # more than any stream: only the ORM can make it
    lm_run.save()
    report(lm_run, 50.0)
    r = post_model(worker_client(lm_run), lm_run, onnx_bytes(gpt()))
    assert r.status_code == 202 and r.json()["time_limit_s"] == 1, r.json()
    result = audited(lm_run)
    assert result["status"] == "not audited", result
    assert "ran over 1 s (MLBENCH_PERPLEXITY_TIMEOUT)" in result["why"], result


def test_a_pending_grade_whose_master_process_ended_reads_interrupted(lm_run, settings):
    """The master restarted during a grade (an hour's limit): its record names the process
    that ran it, which is gone, so it reads interrupted at once; a live one stays pending."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = model_files.folder(lm_run.pk)
    folder.mkdir(parents=True)
    record = {"status": "pending", "kind": "perplexity", "since": model_auditing.now(),
              "time_limit_s": 3600, "step": STEP, "audit_id": "a"}  # fmt: skip
    model_files.write_audit(folder, record | {"grader": model_files.grader()})
    assert model_files.audit_of(lm_run.pk)["status"] == "pending"  # this process: alive
    dead = model_files.grader() | {"pid": gone.pid}
    model_files.write_audit(folder, record | {"grader": dead})
    shown = model_files.audit_of(lm_run.pk)
    assert shown["status"] == "not audited" and shown["verdict"] == "pending"
    assert f"(pid {gone.pid}) ended before it did" in shown["why"]
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=3700)).isoformat()
    model_files.write_audit(folder, record | {"since": old})  # no grader named: the limit
    assert "within MLBENCH_PERPLEXITY_TIMEOUT (3600 s)" in model_files.audit_of(lm_run.pk)["why"]


def test_the_real_set_without_its_archive_is_not_audited(make_run, settings):
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, num_workers=1, test_examples=1000)
    run.summary = {"num_workers": 1, "config": {"valid_tokens": 1000, "vocab": VOCAB, "block": 8}}
    run.save()
    report(run, 50.0)
    r = post_model(worker_client(run), run, onnx_bytes(gpt()), "dataset=wikitext2")
    assert r.status_code == 202, r.json()
    result = audited(run)
    assert result["status"] == "not audited" and "wikitext-2-v1.zip" in result["why"], result


def test_models_and_parameters_a_language_model_cannot_have_are_refused(lm_run, make_run):
    client = worker_client(lm_run)
    report(lm_run, 50.0)
    torch.manual_seed(0)
    other = build_language_model("gpt-tiny", VOCAB + 1).eval()
    cases = [
        (onnx_bytes(other), "dataset=synthetic", "model", "the stream's vocabulary has 60"),
        (b"not onnx", "dataset=synthetic", "model", "not an ONNX model"),
        (onnx_bytes(gpt()), "dataset=cifar10", "dataset", "not a data set of gpt-wikitext2"),
        (onnx_bytes(gpt()), "dataset=synthetic&features=3", "features", "only task 2"),
        (onnx_bytes(gpt()), "dataset=synthetic&precision=bf16", "precision", "offers no --amp"),
        (onnx_bytes(gpt()), "dataset=synthetic&precision=tf32", "precision", "ran on cpu"),
        (onnx_bytes(gpt()), "dataset=synthetic&step=7", "step", "no val_perplexity at step 7"),
    ]
    for body, query, field, words in cases:
        r = post_model(client, lm_run, body, query)
        assert r.status_code == 400 and words in r.json()["errors"][field][0], (query, r.json())
    assert model_files.audit_of(lm_run.pk) is None  # nothing stored
    # An ended run grades nothing new (frozen.py), whatever it posts.
    Run.objects.filter(pk=lm_run.pk).update(state=Run.FINISHED, finished_at=timezone.now())
    r = post_model(client, lm_run, onnx_bytes(gpt()))
    assert r.status_code == 409 and "its results are frozen" in r.json()["detail"]
    # Active runs (one at a time) without a summary, or without the step's perplexity.
    bare = make_run(state=Run.STARTED, task=TASK, seed=SEED)
    report(bare, 50.0)
    r = post_model(worker_client(bare), bare, onnx_bytes(gpt()))
    assert r.status_code == 400 and "post the summary first" in r.json()["errors"]["model"][0]
    Run.objects.filter(pk=bare.pk).update(state=Run.CANCELLED, finished_at=timezone.now())
    silent = make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=TOKENS)
    silent.summary = lm_run.summary
    silent.save()
    r = post_model(worker_client(silent), silent, onnx_bytes(gpt()))
    assert r.status_code == 400 and "reported no val_perplexity" in r.json()["errors"]["model"][0]
    assert model_files.audit_of(bare.pk) is None and model_files.audit_of(silent.pk) is None


def test_a_summary_naming_another_stream_than_the_runs_is_refused(lm_run):
    """The validation stream is fixed when the run is created: a summary saying the run
    evaluated on the first 100 tokens (an easy prefix) does not make that the grade's."""
    lm_run.summary["config"]["valid_tokens"] = 100
    lm_run.save()
    report(lm_run, 50.0)
    r = post_model(worker_client(lm_run), lm_run, onnx_bytes(gpt()))
    assert r.status_code == 400, r.json()
    message = r.json()["errors"]["model"][0]
    assert "evaluated on 100 validation tokens" in message and f"exactly {TOKENS}" in message
    assert model_files.audit_of(lm_run.pk) is None
