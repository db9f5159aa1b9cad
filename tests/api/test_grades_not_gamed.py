"""Grades a run cannot bend (issue: an attacker with an open-division program of their own,
or a leaked run token). Each test tries the cheat and checks it fails with nothing changed:

- the test set is the run's, fixed at POST /api/runs/ (`test_examples`, null: the whole
  set); a file predicting fewer rows (the ones its model gets right) is refused naming both
  counts (run_rules/test_set.py, scoring.graded_size);
- a run's results are frozen when it ends (frozen.py): no replacing file, no new grade
  after the end, only points measured before the end, evaluations write-once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid

import pytest
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.grading import model_files, scoring
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import test_sizes
from mlbench_worker.shared.evaluation import generated_labels, test_sets
from mlbench_worker.shared.evaluation.predictions import digest_of
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import (
    CIFAR,
    SEED,
    N,
    cifar_file,
    cifar_labels,
    grades,
    npz,
    post,
    stored_files,
)
from tests.summaries import summary_body

pytestmark = pytest.mark.django_db
LOGREG = "logreg-epsilon"
ROWS = 2000  # the task-2 run's test set in the attack


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"
    scoring.forget_evaluators()


def _logreg_file(labels, rows: int, step: int = 40) -> bytes:
    """Predictions of the first `rows` examples, every one right."""
    return npz(digest=digest_of(labels[:rows]), step=step, predicted_label=labels[:rows].copy())


# --------------------------------------------------------------------------- the test set


def test_a_run_posting_15_of_its_2000_rows_is_refused_with_both_counts(make_run):
    run = make_run(state=Run.STARTED, task=LOGREG, seed=3, test_examples=ROWS)
    labels = generated_labels.epsilon(3, ROWS, test_sets.EPSILON_FEATURES)
    r = post(worker_client(run), run, _logreg_file(labels, 15))
    assert r.status_code == 400, r.json()
    message = r.json()["errors"]["predictions"][0]
    assert "predicts 15 examples" in message and f"graded on exactly {ROWS}" in message
    assert "test_examples=2000" in message
    assert stored_files(run) == {} and grades(run) == []
    # the honest file of all 2,000 rows is graded on all of them
    r = post(worker_client(run), run, _logreg_file(labels, ROWS))
    assert r.status_code == 201 and r.json()["examples"] == ROWS


def test_a_run_created_without_test_examples_is_graded_on_the_whole_set_only(make_run):
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED)
    r = post(worker_client(run), run, cifar_file())  # 500 of the generated set's 10,000
    assert r.status_code == 400
    message = r.json()["errors"]["predictions"][0]
    assert f"predicts {N} examples" in message and "graded on exactly 10000" in message
    assert "create a run with test_examples" in message
    assert stored_files(run) == {} and grades(run) == []


def test_post_runs_fixes_the_test_set_and_the_worker_is_told(api, redis_settings):
    body = {"name": "small", "task": LOGREG, "dataset": "synthetic", "num_workers": 1}
    r = api.post("/api/runs/", {**body, "test_examples": ROWS}, format="json")
    assert r.status_code == 201, r.json()
    created = r.json()
    assert created["test_examples"] == ROWS
    assert created["manifest"]["config"]["test_examples"] == ROWS
    assert created["manifest"]["setup"]["test_examples"] == ROWS
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=created["id"])))
    assert argv[argv.index("--test-images") + 1] == str(ROWS)
    Run.objects.filter(pk=created["id"]).update(state=Run.CANCELLED)
    whole = api.post("/api/runs/", body, format="json").json()
    assert whole["test_examples"] is None
    assert "--test-images" not in worker_argv(lifecycle.run_spec(Run.objects.get(pk=whole["id"])))


def test_the_form_offers_test_examples_and_a_form_post_stores_it(redis_settings):
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_user("dora"))
    page = client.get("/runs/").content.decode()
    assert 'name="test_examples"' in page
    body = {"name": "form", "task": LOGREG, "dataset": "synthetic", "num_workers": "1"}
    response = client.post("/api/runs/", {**body, "test_examples": "2000"})  # as a form sends
    assert response.status_code == 201, response.content
    assert Run.objects.get(pk=response.json()["id"]).test_examples == ROWS


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"test_examples": 0}, "at least 1"),
        ({"test_examples": test_sizes.whole("epsilon", "synthetic") + 1}, "at most that"),
        # ImageNet's generated set has 2,000 images: "auto" may get it, so 2,001 cannot be had
        ({"task": "resnet50-imagenet", "dataset": "auto", "test_examples": 2001}, "smaller"),
        ({"task": "backend-benchmark", "test_examples": 10}, "it has no test set"),
    ],
)
def test_a_test_set_the_run_cannot_have_is_a_400_naming_test_examples(
    api, redis_settings, change, words
):
    body = {"name": "bad", "task": LOGREG, "num_workers": 2, **change}
    r = api.post("/api/runs/", body, format="json")
    assert r.status_code == 400, r.json()
    assert words in r.json()["errors"]["test_examples"][0]
    assert not Run.objects.exists()


# --------------------------------------------------------------------------- frozen results


def _ended(make_run, **fields) -> Run:
    """A cifar run that started a minute ago and FINISHED just now (within the token's grace)."""
    now = timezone.now()
    return make_run(
        state=Run.FINISHED,
        task=CIFAR,
        seed=SEED,
        test_examples=N,
        started_at=now - dt.timedelta(seconds=60),
        finished_at=now,
        **fields,
    )


def test_after_the_end_the_last_step_cannot_be_replaced_by_the_labels(make_run):
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    client = worker_client(run)
    honest = cifar_file(step=100)
    assert post(client, run, honest).status_code == 201
    runs_ended = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, started_at=runs_ended - dt.timedelta(seconds=60), finished_at=runs_ended
    )
    run.refresh_from_db()
    for cheat in (cifar_file(step=100, wrong=[]), cifar_file(step=101, wrong=[])):
        r = post(client, run, cheat)  # the labels themselves as predictions
        assert r.status_code == 409, r.json()
        detail = r.json()["detail"]
        assert "other bytes" in detail or "its results are frozen" in detail
    assert [v for _, v, _ in grades(run)] == [0.98]
    assert stored_files(run) == {"predictions-step0000000100.npz": honest}
    assert post(client, run, honest).status_code == 200  # a retry of what is stored


def _point(run: Run, name: str, date: dt.datetime, **metadata) -> dict:
    return {
        "run_id": run.pk,
        "name": name,
        "value": 0.5,
        "date": date.isoformat(),
        "metadata": metadata,
        "uid": uuid.uuid4().hex,
    }


def test_after_the_end_only_points_measured_before_it_are_accepted(make_run):
    run = _ended(make_run)
    client = worker_client(run)
    before = run.finished_at - dt.timedelta(seconds=1)
    in_flight = _point(run, "train_loss", before, step=10, elapsed=50.0)
    r = client.post("/api/metrics/", [in_flight], format="json")
    assert r.status_code == 201, r.json()
    late = _point(run, "train_loss", run.finished_at + dt.timedelta(seconds=30), step=11)
    r = client.post("/api/metrics/", [late], format="json")
    assert r.status_code == 409 and "after the end" in r.json()["detail"]
    too_long = _point(run, "val_accuracy", before, step=11, elapsed=3600.0)
    r = client.post("/api/metrics/", [too_long], format="json")
    assert r.status_code == 409 and "lasted 60 s" in r.json()["detail"]
    assert list(Metric.objects.filter(run=run).values_list("name", flat=True)) == ["train_loss"]


def test_an_evaluation_point_is_write_once_per_step(make_run):
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED)
    client = worker_client(run)
    first = _point(run, "val_accuracy", timezone.now(), step=100, elapsed=5.0)
    assert client.post("/api/metrics/", [first], format="json").status_code == 201
    assert client.post("/api/metrics/", [first], format="json").status_code == 201  # a retry
    second = {**_point(run, "val_accuracy", timezone.now(), step=100), "value": 1.0}
    r = client.post("/api/metrics/", [second], format="json")
    assert r.status_code == 409 and "already has its val_accuracy of step 100" in r.json()["detail"]
    twice = [_point(run, "val_accuracy", timezone.now(), step=200) for _ in range(2)]
    r = client.post("/api/metrics/", twice, format="json")
    assert r.status_code == 409 and "two val_accuracy points of step 200" in r.json()["detail"]
    assert list(Metric.objects.filter(run=run).values_list("value", flat=True)) == [0.5]


def test_after_the_end_a_stored_summary_cannot_be_replaced(make_run):
    run = _ended(make_run, summary={"dataset": "synthetic", "val_accuracy": 0.5})
    body = summary_body(dataset="synthetic", final_val_accuracy=0.99)
    r = worker_client(run).post(f"/api/runs/{run.pk}/summary/", body, format="json")
    assert r.status_code == 409 and "write-once" in r.json()["detail"]
    run.refresh_from_db()
    assert run.summary == {"dataset": "synthetic", "val_accuracy": 0.5}


def test_after_the_grace_the_token_is_refused_whatever_it_posts(make_run, settings):
    run = _ended(make_run)
    Run.objects.filter(pk=run.pk).update(
        finished_at=timezone.now() - dt.timedelta(seconds=settings.MLBENCH_RUN_TOKEN_GRACE + 5)
    )
    run.refresh_from_db()
    client = worker_client(run)
    assert post(client, run, cifar_file()).status_code == 401
    point = _point(run, "train_loss", run.finished_at - dt.timedelta(seconds=1), step=1)
    assert client.post("/api/metrics/", [point], format="json").status_code == 401
    assert grades(run) == [] and not Metric.objects.filter(run=run).exists()


def test_a_model_is_write_once_and_nothing_is_audited_after_the_end(make_run):
    import torch

    from tests.api.test_model_audit_api import audited, linear, onnx, post_model, predicted_by

    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    client = worker_client(run)
    module = linear()
    body = npz(digest=digest_of(cifar_labels()), step=100, predicted_class=predicted_by(module))
    assert post(client, run, body).status_code == 201
    honest = onnx(module)
    assert post_model(client, run, honest).status_code == 202
    assert audited(run)["status"] == "matches"
    other = linear()
    with torch.no_grad():
        other[1].bias += 1.0  # another model: its bytes differ
    r = post_model(client, run, onnx(other))
    assert r.status_code == 409 and "already has a model, with other bytes" in r.json()["detail"]
    Run.objects.filter(pk=run.pk).update(state=Run.FINISHED, finished_at=timezone.now())
    run.refresh_from_db()
    r = post_model(client, run, honest)  # a retry after the end: the audit that stands
    assert r.status_code == 200 and r.json()["status"] == "matches"
    assert post_model(client, run, onnx(other)).status_code == 409
    assert (
        model_files.sha256_of(model_files.model_path(run.pk)) == hashlib.sha256(honest).hexdigest()
    )
