"""`mlbench evaluate RUN` audits the run's stored final model in the client's own process,
beside the master's audit; `mlbench show` says the audit. Over a live web server, with the
predictions and the model posted as a worker posts them."""

from __future__ import annotations

import json
import time

import pytest
import requests

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_master.grading import model_files, scoring
from mlbench_master.runs import lifecycle
from mlbench_worker.client.cli import main
from mlbench_worker.shared.evaluation.predictions import digest_of
from tests.api.predictions_bodies import SEED, N, cifar_labels, npz
from tests.api.test_model_audit_api import linear, onnx, predicted_by, tiny_imagenet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _own_home(settings, tmp_path):
    """Files of our own: run ids start again at 1 in every test of a transactional
    database, and another test's run 1 must not find this one's model."""
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_DATA_DIR = "/nonexistent"
    scoring.forget_evaluators()


def _post(live_server, run: Run, what: str, body: bytes) -> requests.Response:
    return requests.post(
        f"{live_server.url}/api/runs/{run.pk}/{what}/?dataset=synthetic",
        data=body,
        headers={
            "Authorization": f"Token {lifecycle.worker_token(run)}",
            "Content-Type": "application/octet-stream",
        },
        timeout=60,
    )


def _cli(live_server, *args: str) -> list[str]:
    token = issue_user_token("alice", create_user=True)
    return ["--url", live_server.url, "--token", token, *args]


def _audited(run: Run) -> dict:
    for _ in range(600):
        found = model_files.audit_of(run.pk) or {}
        if found.get("status") != "pending":
            return found
        time.sleep(0.1)
    raise AssertionError("the audit stayed pending")


def test_evaluate_audits_the_model_here_and_show_says_the_audit(live_server, capsys):
    run = Run.objects.create(
        name="audited", state=Run.STARTED, task="resnet20-cifar10", seed=SEED, test_examples=N
    )
    module = linear()
    body = npz(digest=digest_of(cifar_labels()), step=100, predicted_class=predicted_by(module))
    assert _post(live_server, run, "predictions", body).status_code == 201
    assert _post(live_server, run, "model", onnx(module)).status_code == 202
    assert _audited(run)["status"] == "matches"

    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert (
        "model audit here: matches (step 100, 500 examples, 0 differ); the master's: matches" in out
    )

    assert main(_cli(live_server, "show", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert "model audit" in out and "matches: the final model against step 100's predictions" in out

    # A master whose stored verdict is not what the model earns is caught here.
    path = model_files.folder(run.pk) / model_files.AUDIT
    path.write_text(json.dumps(json.loads(path.read_text()) | {"status": "mismatch"}))
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert "the master's: mismatch" in capsys.readouterr().out
    assert main(_cli(live_server, "show", str(run.pk))) == 0
    assert f"run {run.pk} MODEL AUDIT MISMATCH" in capsys.readouterr().out


def test_evaluate_repeats_the_masters_audit_whatever_its_own_environment(
    live_server, capsys, settings, monkeypatch
):
    """The step, the rows (the master's sample seed and size) and the precision come from
    the master's audit, not from this process's MLBENCH_AUDIT_SAMPLE; a predictions file
    posted after the model is not mistaken for the audited one."""
    settings.MLBENCH_AUDIT_SAMPLE = 300
    monkeypatch.setenv("MLBENCH_AUDIT_SAMPLE", "7")
    run = Run.objects.create(
        name="sampled", state=Run.STARTED, task="resnet20-cifar10", seed=SEED, test_examples=N
    )
    module = linear()
    body = npz(digest=digest_of(cifar_labels()), step=100, predicted_class=predicted_by(module))
    assert _post(live_server, run, "predictions", body).status_code == 201
    assert _post(live_server, run, "model", onnx(module)).status_code == 202
    assert _audited(run)["status"] == "matches"
    later = npz(digest=digest_of(cifar_labels()), step=200, predicted_class=cifar_labels())
    assert _post(live_server, run, "predictions", later).status_code == 201
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert "model audit here: matches (step 100, a sample of 300 examples, 0 differ)" in out
    assert (
        "the master's: matches (shown: not audited: the model was audited against step 100" in out
    )


def test_evaluate_audits_a_task_1b_model_at_the_crop_its_input_declares(live_server, capsys):
    """The client knows the run's --crop no more than the master: the model says it, and
    this process makes the synthetic images again at that crop."""
    run = Run.objects.create(
        name="1b", state=Run.STARTED, task="resnet50-imagenet", seed=SEED, test_examples=20
    )
    _, body, model = tiny_imagenet(size=20, crop=72)
    assert _post(live_server, run, "predictions", body).status_code == 201
    assert _post(live_server, run, "model", model).status_code == 202
    assert _audited(run)["status"] == "matches"
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert "model audit here: matches (step 100, 20 examples, 0 differ); the master's: matches" in (
        out
    )


def test_evaluate_without_a_model_says_so(live_server, capsys):
    run = Run.objects.create(
        name="no model", state=Run.STARTED, task="resnet20-cifar10", seed=SEED, test_examples=N
    )
    labels = cifar_labels()
    assert (
        _post(
            live_server, run, "predictions", npz(digest=digest_of(labels), predicted_class=labels)
        ).status_code
        == 201
    )
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    assert "model: none stored, not audited" in capsys.readouterr().out
