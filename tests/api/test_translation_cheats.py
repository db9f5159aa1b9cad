"""Trying to cheat task 4b's grade (BLEU) through POST /api/runs/<id>/predictions/: each
file below is scored by the evaluator for what it is, equal to a direct sacrebleu call on
the same plain text, and low; a grade a run posts itself is refused. Honest grades and
refusals: test_translation_grading.py."""

from __future__ import annotations

import collections
import datetime as dt
import uuid

import numpy as np
import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.grading import scoring
from mlbench_worker.shared.evaluation.predictions import digest_of_text
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import grades, npz, post, stored_files
from tests.api.translation_bodies import (
    SEED,
    TASK,
    N,
    direct_bleu,
    pairs,
    pieces,
    references,
    text_file,
)

pytestmark = pytest.mark.django_db
CEILING = 10.0  # BLEU no cheat below reaches: half the light goal (20); the small generated
# lexicon shares more n-grams between sentences than news text does


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"
    scoring.forget_evaluators()


@pytest.fixture
def mt_run(make_run):
    return make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)


def _common(k: int) -> list[str]:
    counts = collections.Counter(w for r in references() for w in r.split())
    return [w for w, _ in counts.most_common(k)]


def _cheats() -> dict[str, list[str]]:
    refs = references()
    filler = _common(6) * 40
    return {
        "the sources copied": [src for src, _ in pairs()],
        "every line empty": [""] * N,
        "one sentence for every line": [refs[0]] * N,
        "frequent words to the reference's length": [
            " ".join(filler[: len(r.split())]) for r in refs
        ],
        "two right words padded to pass the brevity penalty": [
            " ".join(r.split()[:2] + ["der"] * (len(r.split()) - 2)) for r in refs
        ],
    }


@pytest.mark.parametrize("cheat", list(_cheats()))
def test_a_cheat_is_graded_for_what_it_is(mt_run, cheat):
    plain = _cheats()[cheat]
    r = post(worker_client(mt_run), mt_run, text_file([pieces(p) if p else "" for p in plain]))
    assert r.status_code == 201, r.json()
    graded = r.json()["metrics"]["val_bleu"]
    assert graded == pytest.approx(direct_bleu(plain, references()), abs=1e-9)
    assert graded < CEILING


def test_a_file_holding_its_own_bleu_is_refused(mt_run):
    lines = "\n".join(pieces(s) for s, _ in pairs()).encode()
    body = npz(
        digest=digest_of_text(references()),
        predicted_text=np.frombuffer(lines, np.uint8),
        val_bleu=np.array(99.0),
    )
    r = post(worker_client(mt_run), mt_run, body)
    assert (
        r.status_code == 400 and "unknown fields val_bleu" in r.json()["errors"]["predictions"][0]
    )
    assert stored_files(mt_run) == {} and grades(mt_run) == []


def test_a_grade_posted_as_a_metric_point_is_refused(mt_run):
    point = {
        "run_id": mt_run.pk,
        "name": "evaluated_val_bleu",
        "value": 99.0,
        "date": (timezone.now() - dt.timedelta(seconds=1)).isoformat(),
        "metadata": {"step": 100, "elapsed": 1.0},
        "uid": uuid.uuid4().hex,
    }
    r = worker_client(mt_run).post("/api/metrics/", [point], format="json")
    assert r.status_code == 400 and "evaluator's grades" in str(r.json())
    assert grades(mt_run) == []
