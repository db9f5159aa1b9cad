"""POST /api/runs/<id>/predictions/: the platform grades a run's predictions with the
evaluator and stores the grade; GET lists and returns the stored files. Refusals:
test_predictions_refused.py.

Grades are checked against counts made by hand on the evaluator's own labels (the labels'
agreement with the generators is tests/evaluation/'s).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.grading import prediction_files, scoring
from mlbench_worker.shared.evaluation import generated_labels, predictions, test_sets
from mlbench_worker.shared.evaluation.predictions import digest_of
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import (
    CIFAR,
    SEED,
    WRONG,
    N,
    cifar_file,
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


# --------------------------------------------------------------------------- grades


def test_task_1a_generated_set_is_graded_and_stored(cifar_run):
    body = cifar_file()
    r = post(worker_client(cifar_run), cifar_run, body)
    assert r.status_code == 201, r.json()
    assert r.json() == {
        "step": 100,
        "epoch": 1.5,
        "elapsed": 30.25,
        "examples": 500,
        "dataset": "synthetic",
        "metrics": {"val_accuracy": 490 / 500},
    }
    meta = {"step": 100, "epoch": 1.5, "elapsed": 30.25, "examples": 500, "dataset": "synthetic"}
    assert grades(cifar_run) == [("evaluated_val_accuracy", 0.98, meta)]
    assert stored_files(cifar_run) == {"predictions-step0000000100.npz": body}


def test_task_2_generated_set_is_graded(make_run):
    run = make_run(state=Run.STARTED, task="logreg-epsilon", seed=3, test_examples=1000)
    labels = generated_labels.epsilon(3, 1000, test_sets.EPSILON_FEATURES)
    predicted = labels.copy()
    predicted[:125] *= -1  # 875 of 1,000 right
    body = npz(digest=digest_of(labels), step=40, predicted_label=predicted)
    r = post(worker_client(run), run, body)
    assert r.status_code == 201, r.json()
    assert r.json()["metrics"] == {"val_accuracy": 0.875} and r.json()["examples"] == 1000
    # a set generated with other features has other labels: its digest is not this file's
    r = post(worker_client(run), run, body, "dataset=synthetic&features=50")
    assert r.status_code == 400 and "another test set" in r.json()["errors"]["predictions"][0]
    assert [(n, v) for n, v, _ in grades(run)] == [("evaluated_val_accuracy", 0.875)]


def test_task_1b_generated_set_is_graded_top1_and_top5(make_run):
    run = make_run(state=Run.STARTED, task="resnet50-imagenet", seed=1)  # the whole set
    n = 2000
    labels = np.arange(n) % 1000  # the generated validation set: image i is of class i mod 1000
    top5 = (labels[:, None] + np.arange(1, 6)) % 1000  # never the right class
    top5[:1200, 0] = labels[:1200]  # 1,200 right at the top
    top5[1200:1500, 2] = labels[1200:1500]  # 300 more right within the top 5
    body = npz(digest=digest_of(labels), predicted_class=top5[:, 0], predicted_top5=top5)
    r = post(worker_client(run), run, body)
    assert r.status_code == 201, r.json()
    assert r.json()["metrics"] == {"val_accuracy": 0.6, "val_top5_accuracy": 0.75}
    assert [(n, v) for n, v, _ in grades(run)] == [
        ("evaluated_val_accuracy", 0.6),
        ("evaluated_val_top5_accuracy", 0.75),
    ]


def test_a_step_is_write_once_a_retry_gets_its_grade_other_bytes_409(cifar_run, staff_api):
    client = worker_client(cifar_run)
    first = cifar_file()
    assert post(client, cifar_run, first).status_code == 201
    assert post(client, cifar_run, cifar_file(step=200)).status_code == 201
    r = post(client, cifar_run, first)  # a retry: the same bytes
    assert r.status_code == 200 and r.json()["metrics"] == {"val_accuracy": 0.98}
    again = cifar_file(wrong=[])  # the same step, now every row right
    r = post(client, cifar_run, again)
    assert r.status_code == 409, r.json()
    assert "already has predictions of step 100, with other bytes" in r.json()["detail"]
    r = post(staff_api, cifar_run, again)  # staff cannot replace it either
    assert r.status_code == 409
    assert [(v, m["step"]) for _, v, m in grades(cifar_run)] == [(0.98, 100), (0.98, 200)]
    assert stored_files(cifar_run)["predictions-step0000000100.npz"] == first


def test_the_master_lacks_the_real_labels_the_file_is_kept_ungraded(make_run, cifar_run):
    r = post(worker_client(cifar_run), cifar_run, cifar_file(), "dataset=cifar10")
    assert r.status_code == 202 and r.json()["graded"] is False
    assert "test labels are not under" in r.json()["why"]
    assert list(stored_files(cifar_run)) == ["predictions-step0000000100.npz"]
    assert grades(cifar_run) == []
    Run.objects.filter(pk=cifar_run.pk).update(state=Run.FINISHED)  # one active run at a time
    imagenet = make_run(state=Run.STARTED, task="resnet50-imagenet", test_examples=3)
    top5 = np.arange(15).reshape(3, 5)
    body = npz(digest="0" * 64, predicted_class=top5[:, 0], predicted_top5=top5)
    r = post(worker_client(imagenet), imagenet, body, "dataset=imagenet")
    assert r.status_code == 202 and "ILSVRC2012_devkit_t12.tar.gz" in r.json()["why"]


def test_each_test_set_has_one_evaluator_kept_in_a_small_lru():
    sets = [test_sets.TestSet(CIFAR, "synthetic", seed, 100) for seed in range(9)]
    first = scoring.evaluator_for(sets[0])
    assert scoring.evaluator_for(sets[0]) is first
    for other in sets[1:]:
        scoring.evaluator_for(other)
    assert scoring.evaluator_for(sets[0]) is not first  # the oldest of 9 left a cache of 8


# --------------------------------------------------------------------------- reading back


def test_list_and_download_return_the_stored_bytes(cifar_run, api, make_run, tmp_path):
    bodies = {100: cifar_file(), 200: cifar_file(step=200, wrong=[])}
    for body in bodies.values():
        assert post(worker_client(cifar_run), cifar_run, body).status_code == 201
    for client in (api, worker_client(cifar_run)):
        r = client.get(f"/api/runs/{cifar_run.pk}/predictions/")
        assert r.status_code == 200, r.json()
        listed = r.json()
        assert [f["step"] for f in listed] == [100, 200]
        for entry in listed:
            body = bodies[entry["step"]]
            assert entry["bytes"] == len(body)
            assert entry["sha256"] == hashlib.sha256(body).hexdigest()
            assert entry["url"] == (
                f"http://testserver/api/runs/{cifar_run.pk}/predictions/{entry['step']}/"
            )
            got = client.get(entry["url"], HTTP_ACCEPT="application/octet-stream")
            assert got.status_code == 200 and got["Content-Type"] == "application/octet-stream"
            data = b"".join(got.streaming_content)
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
            (tmp_path / "got.npz").write_bytes(data)
            assert predictions.read(tmp_path / "got.npz").step == entry["step"]
    other = worker_client(make_run(finished_at=timezone.now()))
    assert other.get(f"/api/runs/{cifar_run.pk}/predictions/").status_code == 403
    r = api.get(f"/api/runs/{cifar_run.pk}/predictions/300/")
    assert r.status_code == 404 and "no predictions of step 300" in r.json()["detail"]
    assert api.get("/api/runs/999999/predictions/").status_code == 404


def test_deleting_the_run_deletes_its_files(make_run, staff_api):
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    assert post(worker_client(run), run, cifar_file()).status_code == 201
    assert prediction_files.folder(run.pk).exists()
    assert staff_api.delete(f"/api/runs/{run.pk}/").status_code == 204
    assert not prediction_files.folder(run.pk).exists()


# --------------------------------------------------------------------------- over real HTTP


@pytest.mark.django_db(transaction=True)
def test_over_http_posts_racing_each_other_leave_one_grade_per_step(live_server, settings):
    """Posts of one step at once over the live server: one is stored (201), the others
    are refused (409), and the step has one file and the grade of that file; each body
    again answers 200 (the stored one) or 409."""
    import concurrent.futures as cf

    import requests

    from mlbench_master.runs import lifecycle

    scoring.forget_evaluators()
    run = Run.objects.create(name="race", state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    headers = {
        "Authorization": f"Token {lifecycle.worker_token(run)}",
        "Content-Type": "application/octet-stream",
    }
    url = f"{live_server.url}/api/runs/{run.pk}/predictions/?dataset=synthetic"
    bodies = [cifar_file(wrong=WRONG[:k]) for k in range(6)]  # 6 grades of one step

    def send(body: bytes) -> int:
        return requests.post(url, data=body, headers=headers, timeout=60).status_code

    with cf.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(send, bodies))
    assert sorted(answers) == [201] + [409] * 5, answers
    (grade,) = grades(run)
    kept = stored_files(run)["predictions-step0000000100.npz"]
    assert bodies.index(kept) == answers.index(201)
    assert grade[1] == (N - bodies.index(kept)) / N
    with cf.ThreadPoolExecutor(6) as pool:
        again = list(pool.map(send, bodies))
    assert again == [200 if b == kept else 409 for b in bodies]
    assert len(grades(run)) == 1

    settings.MLBENCH_PREDICTIONS_MAX_BYTES = 1000  # the server reads settings per request
    r = requests.post(url, data=bodies[0], headers=headers, timeout=60)
    assert r.status_code == 413 and "at most 1000 bytes" in r.json()["detail"]
