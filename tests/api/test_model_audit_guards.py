"""What keeps the ONNX audit honest against a run that tries to pass it without a model that
made its predictions, or to use it against the master: a sample it cannot know in advance,
the step it names, and a posted model that reads files, never ends or outlives its master
(docs/checking.rst, "The ONNX audit"). Task 1b's models, once refused, are audited:
test_model_audit_api.py."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pytest

from mlbench_master.api.models import Run
from mlbench_master.grading import model_auditing, model_files
from mlbench_worker.shared.evaluation.predictions import digest_of
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import CIFAR, SEED, N, cifar_labels, npz, post
from tests.api.test_model_audit_api import audited, linear, onnx, post_model, predicted_by
from tests.evaluation import hostile_models

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    from mlbench_master.grading import scoring

    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"
    settings.MLBENCH_AUDIT_SAMPLE = 300  # of the 500 examples: a sample
    scoring.forget_evaluators()


@pytest.fixture
def run(make_run):
    return make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)


def _predictions(run, classes, step=100) -> None:
    body = npz(digest=digest_of(cifar_labels()), step=step, predicted_class=classes)
    assert post(worker_client(run), run, body).status_code == 201


def test_a_liar_who_knows_the_runs_seed_cannot_know_the_audited_rows(run):
    """The sample was once drawn from the run's seed and a public constant: a liar could
    answer the model's classes on those rows and the labels everywhere else. Its seed is now
    drawn when the model is stored, after the predictions were fixed."""
    module = linear()
    honest = predicted_by(module)
    foreseen = np.random.default_rng([SEED, 0xA0D1]).choice(N, 300, replace=False)
    lied = cifar_labels().copy()  # the true labels, a perfect grade...
    lied[foreseen] = honest[foreseen]  # ...except on the rows it expected to be run
    assert np.count_nonzero(lied != honest) > 100
    _predictions(run, lied)
    first = post_model(worker_client(run), run, onnx(module)).json()
    result = audited(run)
    assert (result["status"], result["examples"]) == ("mismatch", 300), result
    # Each model posted draws its own sample, and the count of posts is shown.
    again = post_model(worker_client(run), run, onnx(module)).json()
    assert again["sample_seed"] != first["sample_seed"] and again["audits"] == 2


def test_the_model_is_audited_against_the_step_it_names(run):
    module = linear()
    _predictions(run, predicted_by(module), step=100)
    _predictions(run, (predicted_by(module) + 1) % 10, step=200)  # another model's
    r = post_model(worker_client(run), run, onnx(module), "dataset=synthetic&step=150")
    assert r.status_code == 400
    assert r.json()["errors"]["step"] == [
        f"run {run.pk} has no predictions of step 150 stored (the last: 100, 200)"
    ]
    assert model_files.audit_of(run.pk) is None
    r = post_model(worker_client(run), run, onnx(module), "dataset=synthetic&step=100")
    assert r.status_code == 202 and r.json()["step"] == 100
    record = audited(run, read=lambda pk: model_files.read(model_files.folder(pk)))
    assert (record["status"], record["step"], record["differ"]) == ("matches", 100, 0)
    # Shown to readers: the run's later predictions are not covered by that audit.
    shown = model_files.audit_of(run.pk)
    assert shown["status"] == "not audited" and shown["verdict"] == "matches"
    assert "a later step (200)" in shown["why"]


def test_predictions_cannot_be_replaced_after_the_model_was_audited_on_them(run):
    """Once the model matched them, the labels posted as step 100 would be a perfect grade:
    a step's file is write-once, so the audited file and its grade stand."""
    module = linear()
    _predictions(run, predicted_by(module))
    post_model(worker_client(run), run, onnx(module))
    assert audited(run)["status"] == "matches"
    body = npz(digest=digest_of(cifar_labels()), step=100, predicted_class=cifar_labels())
    r = post(worker_client(run), run, body)  # step 100 again, now the labels
    assert r.status_code == 409 and "write-once" in r.json()["detail"]
    assert model_files.audit_of(run.pk)["status"] == "matches"


def test_a_model_whose_weights_are_a_file_of_the_masters_directory_is_refused_unread(
    run, tmp_path, monkeypatch
):
    """onnxruntime reads external data relative to the working directory: a model could
    score by the master's files (settings, a database) and read them back in its verdict."""
    secret = tmp_path / "weights.bin"
    secret.write_bytes(hostile_models.WEIGHTS.tobytes())  # loadable, were it read
    day_ago = secret.stat().st_mtime_ns - 86_400 * 10**9
    os.utime(secret, ns=(day_ago, secret.stat().st_mtime_ns))
    monkeypatch.chdir(tmp_path)
    _predictions(run, np.zeros(N, np.int64))
    r = post_model(worker_client(run), run, hostile_models.external_weights("weights.bin"))
    assert r.status_code == 400, r.json()
    assert (
        "keeps the data of tensor 'w' (in 'weights.bin') in another file"
        in (r.json()["errors"]["model"][0])
    )
    assert model_files.audit_of(run.pk) is None
    unread = secret.stat().st_atime_ns == day_ago
    secret.read_bytes()
    if secret.stat().st_atime_ns != day_ago:  # this file system records reads (relatime)...
        assert unread  # ...and none happened before this test's own


def test_a_model_that_never_ends_is_refused_within_the_time_limit(run, settings):
    settings.MLBENCH_AUDIT_TIMEOUT = 5
    _predictions(run, np.zeros(N, np.int64))
    # 3**6 turns for the contract's check of three rows; 300**6 for the audit's batch.
    r = post_model(worker_client(run), run, hostile_models.looping(6))
    assert r.status_code == 202, r.json()
    result = audited(run)
    assert (result["status"], result["why"]) == (
        "refused",
        "the model ran over 5 s (MLBENCH_AUDIT_TIMEOUT)",
    )


def test_a_pending_audit_older_than_the_time_limit_was_interrupted(run, settings):
    """The master restarted during the audit: its record stays "pending" on disk."""
    settings.MLBENCH_AUDIT_TIMEOUT = 60
    target = model_files.folder(run.pk)
    target.mkdir(parents=True)
    began = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60 + model_files.GRACE_S + 1)
    model_files.write_audit(target, {"status": "pending", "since": began.isoformat()})
    shown = model_files.audit_of(run.pk)
    assert shown["status"] == "not audited" and shown["why"].startswith("interrupted: ")
    assert "did not end within MLBENCH_AUDIT_TIMEOUT (60 s)" in shown["why"]
    model_files.write_audit(
        target, {"status": "pending", "since": dt.datetime.now(dt.UTC).isoformat()}
    )
    assert model_files.audit_of(run.pk)["status"] == "pending"  # still within its time


def test_an_earlier_models_audit_never_replaces_a_later_ones(run):
    module = linear()
    _predictions(run, predicted_by(module), step=100)
    assert model_auditing.AUDIT_SLOTS.acquire(timeout=60)  # both audits wait their turn
    try:
        first = post_model(worker_client(run), run, onnx(module)).json()
        _predictions(run, (predicted_by(module) + 1) % 10, step=200)
        second = post_model(worker_client(run), run, onnx(module)).json()  # the same bytes
    finally:
        model_auditing.AUDIT_SLOTS.release()
    assert first["audit_id"] != second["audit_id"]
    result = audited(run)
    assert (result["audit_id"], result["step"], result["status"]) == (
        second["audit_id"],
        200,
        "mismatch",
    )
