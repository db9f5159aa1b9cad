"""POST /api/runs/<id>/predictions/ refuses what is not a prediction of the run's test set,
a parameter naming a set the run cannot have, another run's token and a body over the cap:
each with a message naming the problem, storing nothing, the earlier grade and its file
left as they were."""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.grading import prediction_files, scoring
from mlbench_worker.shared.evaluation import predictions
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

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"  # empty: real labels unavailable
    scoring.forget_evaluators()


@pytest.fixture
def cifar_run(make_run):
    return make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)


# --------------------------------------------------------------------------- refusals


def _float_file() -> bytes:
    labels = cifar_labels()
    return npz(digest=digest_of(labels), predicted_class=labels.astype(float))


def _nan_file() -> bytes:
    values = cifar_labels().astype(float)
    values[5] = np.nan
    return npz(digest=digest_of(cifar_labels()), predicted_class=values)


def _out_of_range() -> bytes:
    labels = cifar_labels()
    predicted = labels.copy()
    predicted[7] = 10
    return npz(digest=digest_of(labels), predicted_class=predicted)


def _npy_file() -> bytes:
    buf = io.BytesIO()
    np.save(buf, cifar_labels())
    return buf.getvalue()


BAD = {
    "another digest": (lambda: cifar_file(labels=cifar_labels(seed=8)), "another test set"),
    "the set in another order": (
        lambda: npz(digest=digest_of(cifar_labels()[::-1]), predicted_class=cifar_labels()),
        "another test set",
    ),
    "a shorter list": (
        lambda: npz(digest=digest_of(cifar_labels()), predicted_class=cifar_labels()[:499]),
        "predicts 499 examples; run",
    ),
    "floats": (_float_file, "predicted_class is float64; it must hold integers"),
    "NaN": (_nan_file, "predicted_class holds NaN (first at row 5)"),
    "a class out of range": (_out_of_range, "row 7 holds 10; the classes of"),
    "a field the task lacks": (
        lambda: npz(
            digest=digest_of(cifar_labels()),
            predicted_class=cifar_labels(),
            predicted_label=np.ones(N, int),
        ),
        "predicted_label not expected",
    ),
    "not a .npz": (lambda: b"these are not predictions", "cannot be read as a .npz file"),
    "a single .npy": (_npy_file, "is a single .npy array, not a .npz file"),
    "no predictions": (lambda: npz(digest=digest_of(cifar_labels())), "holds no predictions"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_predictions_are_refused_and_nothing_is_stored(cifar_run, case):
    client = worker_client(cifar_run)
    good = cifar_file()
    assert post(client, cifar_run, good).status_code == 201
    before = grades(cifar_run)
    make, words = BAD[case]
    bad = make()
    for step_body in (bad, _with_step(bad, 300)):  # the graded step and a new one
        r = post(client, cifar_run, step_body)
        assert r.status_code == 400, r.json()
        message = r.json()["errors"]["predictions"][0]
        assert words in message and message in r.json()["detail"]
        assert str(prediction_files.folder(cifar_run.pk)) not in message  # no server path
    assert grades(cifar_run) == before
    assert stored_files(cifar_run) == {"predictions-step0000000100.npz": good}


def _with_step(body: bytes, step: int) -> bytes:
    """`body` with another step, where it is a .npz with a step at all."""
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
    except Exception:
        return body
    if "step" not in arrays:
        return body
    arrays["step"] = np.array(step)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("", "dataset", "required"),
        ("dataset=imagenet", "dataset", "'imagenet' is not a data set of resnet20-cifar10"),
        ("dataset=synthetic&features=50", "features", "only task 2's generated set"),
        ("dataset=synthetic&features=x", "features", "is not a whole number"),
    ],
)
def test_bad_parameters_are_refused_naming_them(cifar_run, query, field, words):
    r = post(worker_client(cifar_run), cifar_run, cifar_file(), query)
    assert r.status_code == 400 and words in r.json()["errors"][field][0], r.json()
    assert stored_files(cifar_run) == {} and grades(cifar_run) == []


def test_a_run_that_reported_its_data_set_is_held_to_it(make_run):
    run = make_run(
        state=Run.STARTED, task=CIFAR, seed=SEED, dataset_used="cifar10", test_examples=N
    )
    r = post(worker_client(run), run, cifar_file())
    assert r.status_code == 400 and "reported that it used cifar10" in r.json()["detail"]


def test_an_empty_body_is_refused(cifar_run):
    r = post(worker_client(cifar_run), cifar_run, b"")
    assert r.status_code == 400 and "the body is empty" in r.json()["errors"]["predictions"][0]


def test_a_form_is_refused_naming_what_to_send(cifar_run, staff_api):
    r = staff_api.post(
        f"/api/runs/{cifar_run.pk}/predictions/?dataset=synthetic",
        {"file": io.BytesIO(cifar_file())},
        format="multipart",
    )
    assert r.status_code == 400 and "send the file's bytes" in r.json()["detail"]
    assert stored_files(cifar_run) == {}


def test_a_measurement_has_nothing_to_grade(make_run):
    run = make_run(state=Run.STARTED, task="backend-benchmark")
    r = post(worker_client(run), run, cifar_file())
    assert r.status_code == 400 and "has no test set" in r.json()["errors"]["predictions"][0]


def test_a_language_model_is_not_graded_from_predictions_and_says_so(make_run):
    run = make_run(state=Run.STARTED, task="gpt-wikitext2")
    r = post(worker_client(run), run, cifar_file())
    assert r.status_code == 400, r.content
    message = r.json()["errors"]["predictions"][0]
    assert "does not grade task 'gpt-wikitext2' from predictions: its val_perplexity" in message
    assert "post the final model (ONNX) to /api/runs/<id>/model/" in message
    assert stored_files(run) == {} and grades(run) == []


def test_over_the_cap_is_413_and_nothing_is_kept(cifar_run, settings):
    body = cifar_file()
    settings.MLBENCH_PREDICTIONS_MAX_BYTES = len(body) - 1
    r = post(worker_client(cifar_run), cifar_run, body)
    assert r.status_code == 413 and "MLBENCH_PREDICTIONS_MAX_BYTES" in r.json()["detail"]
    # a small compressed file that unpacks to more than the cap is refused the same way
    buf = io.BytesIO()
    labels = cifar_labels(n=2000)
    np.savez_compressed(
        buf,
        format=np.array(predictions.FORMAT),
        test_set_digest=np.array(digest_of(labels)),
        step=np.array(1),
        epoch=np.array(0.0),
        elapsed=np.array(0.0),
        predicted_class=np.zeros(200_000, np.int64),
    )
    assert len(buf.getvalue()) < settings.MLBENCH_PREDICTIONS_MAX_BYTES
    r = post(worker_client(cifar_run), cifar_run, buf.getvalue())
    assert r.status_code == 413 and "when unpacked" in r.json()["detail"]
    assert stored_files(cifar_run) == {} and grades(cifar_run) == []


def test_another_runs_token_is_403_and_nothing_is_stored(cifar_run, make_run):
    other = make_run(task=CIFAR, finished_at=timezone.now())
    r = post(worker_client(other), cifar_run, cifar_file())
    assert r.status_code == 403
    assert f"worker token of run {other.pk} may not post predictions" in r.json()["detail"]
    assert stored_files(cifar_run) == {} and grades(cifar_run) == []


def test_who_may_post(cifar_run, api, staff_api, anon):
    assert post(anon, cifar_run, cifar_file()).status_code == 401
    r = post(api, cifar_run, cifar_file())
    assert r.status_code == 403 and "is not staff" in r.json()["detail"]
    assert post(staff_api, cifar_run, cifar_file()).status_code == 201


def test_after_the_grace_the_token_is_refused_as_for_metrics(make_run, settings):
    ended = timezone.now() - dt.timedelta(seconds=settings.MLBENCH_RUN_TOKEN_GRACE + 5)
    run = make_run(state=Run.FINISHED, task=CIFAR, seed=SEED, finished_at=ended, test_examples=N)
    r = post(worker_client(run), run, cifar_file())
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    assert stored_files(run) == {}


def test_a_run_cannot_post_grades_as_metrics(cifar_run):
    point = {"run_id": cifar_run.pk, "name": "evaluated_val_accuracy", "value": 0.99}
    r = worker_client(cifar_run).post("/api/metrics/", point, format="json")
    assert r.status_code == 400 and "are the evaluator's grades" in r.json()["errors"]["name"][0]
    assert grades(cifar_run) == []


def test_no_temporary_upload_is_left_behind(cifar_run, settings):
    client = worker_client(cifar_run)
    assert post(client, cifar_run, cifar_file()).status_code == 201
    assert post(client, cifar_run, b"PK\x03\x04 a broken zip").status_code == 400
    settings.MLBENCH_PREDICTIONS_MAX_BYTES = 100
    assert post(client, cifar_run, cifar_file(step=5)).status_code == 413
    assert list(stored_files(cifar_run)) == ["predictions-step0000000100.npz"]
