"""Task 4b (translation) graded by the master: POST /api/runs/<id>/predictions/ on the real
PostgreSQL scores a file of hypotheses with sacrebleu against the references the evaluator
holds (regenerated, or newstest2017 from its checksummed archive), stores the grade with
sacrebleu's signature, refuses what is not hypotheses of the run's test set with a 400 and
stores nothing then, and marks a run whose own BLEU differs from the grade. Cheats:
test_translation_cheats.py."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid

import numpy as np
import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.grading import model_files, scoring
from mlbench_master.results import stored
from mlbench_worker.shared import wmt17
from mlbench_worker.shared.evaluation.predictions import digest_of_text
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import grades, npz, post, stored_files
from tests.api.translation_bodies import (
    SEED,
    SIGNATURE,
    TASK,
    N,
    direct_bleu,
    newstest_archive,
    pairs,
    pieces,
    raw_text_file,
    references,
    text_file,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"  # empty: newstest2017 unavailable
    scoring.forget_evaluators()


@pytest.fixture
def mt_run(make_run):
    return make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)


def _partly_right() -> list[str]:
    """Plain-text hypotheses: every third reference loses its last two words, every fifth
    has its first word replaced."""
    out = []
    for i, ref in enumerate(references()):
        words = ref.split()
        if i % 3 == 0:
            words = words[:-2]
        if i % 5 == 0:
            words[0] = "Manchmal"
        out.append(" ".join(words))
    return out


def test_the_grade_is_sacrebleu_on_the_detokenised_lines_and_its_signature_is_stored(mt_run):
    plain = _partly_right()
    expected = direct_bleu(plain, references())
    assert 30 < expected < 95  # neither perfect nor nothing: the test tells grades apart
    r = post(worker_client(mt_run), mt_run, text_file([pieces(p) for p in plain]))
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["metrics"] == {"val_bleu": pytest.approx(expected, abs=1e-9)}
    assert body["signature"] == SIGNATURE and body["examples"] == N
    [(name, value, meta)] = grades(mt_run)
    assert name == "evaluated_val_bleu" and value == pytest.approx(expected, abs=1e-9)
    assert meta["signature"] == SIGNATURE and meta["examples"] == N and meta["step"] == 100
    # the run's page data: graded on N sentences, evaluated, no self-report to compare
    evaluation = stored.evaluation_of(mt_run, {})
    assert evaluation["status"] == stored.EVALUATED and evaluation["grades"] == 1


def test_the_references_are_regenerated_from_the_runs_seed(make_run):
    other = make_run(state=Run.STARTED, task=TASK, seed=SEED + 1, test_examples=N)
    body = text_file([pieces(r) for r in references()])  # seed SEED's set
    r = post(worker_client(other), other, body)
    assert r.status_code == 400 and "another test set" in r.json()["errors"]["predictions"][0]
    right = text_file(
        [pieces(r) for r in references(SEED + 1)], digest=digest_of_text(references(SEED + 1))
    )
    r = post(worker_client(other), other, right)
    assert r.status_code == 201 and r.json()["metrics"]["val_bleu"] == pytest.approx(100.0)


def _refusals():
    lines = [pieces(r) for r in references()]
    good = "\n".join(lines).encode()
    cut = text_file(lines[:-1])
    return {
        "fewer lines": (cut, f"predicts {N - 1} examples; run"),
        "more lines": (text_file([*lines, "▁extra"]), f"predicts {N + 1} examples"),
        "not UTF-8": (raw_text_file(good[:30] + b"\xc3\x28" + good[32:]), "is not UTF-8: line 0"),
        "control character": (
            raw_text_file(good.replace(b"\n", b"\r\n", 1)),
            "line 0 holds the control character U+000D",
        ),
        "NUL": (raw_text_file(good.replace(b" ", b"\x00", 1)), "U+0000"),
        "other references": (
            text_file(lines, digest=digest_of_text(references()[::-1])),
            "another test set",
        ),
        "numpy text": (
            npz(digest=digest_of_text(references()), predicted_text=np.array(lines)),
            "1-D uint8 array of UTF-8 bytes",
        ),
        "classes instead": (
            npz(digest=digest_of_text(references()), predicted_class=np.zeros(N, np.int64)),
            "takes predicted_text",
        ),
        "damaged": (text_file(lines)[:-40], "cannot be read as a .npz file"),
        "lines padded far beyond a decoder's": (
            text_file([line + " ▁der" * 2000 for line in lines]),
            "more than 20 times its references'",
        ),
        "not a zip": (b"\x00" * 64, "cannot be read as a .npz file"),
    }


@pytest.mark.parametrize("case", list(_refusals()))
def test_a_file_that_is_not_hypotheses_of_the_test_set_is_a_400_storing_nothing(mt_run, case):
    body, said = _refusals()[case]
    r = post(worker_client(mt_run), mt_run, body)
    assert r.status_code == 400, r.json()
    assert said in r.json()["errors"]["predictions"][0]
    assert stored_files(mt_run) == {} and grades(mt_run) == []


def test_an_oversized_file_is_a_413_storing_nothing(mt_run, settings):
    body = text_file([pieces(r) for r in references()])
    settings.MLBENCH_PREDICTIONS_MAX_BYTES = len(body) - 1
    r = post(worker_client(mt_run), mt_run, body)
    assert r.status_code == 413 and "MLBENCH_PREDICTIONS_MAX_BYTES" in r.json()["detail"]
    assert stored_files(mt_run) == {} and grades(mt_run) == []


def _bleu_point(run: Run, value: float, step: int) -> dict:
    return {
        "run_id": run.pk,
        "name": "val_bleu",
        "value": value,
        "date": (timezone.now() - dt.timedelta(seconds=1)).isoformat(),
        "metadata": {"step": step, "epoch": 1.0, "elapsed": 30.25},
        "uid": uuid.uuid4().hex,
    }


def test_a_run_whose_own_bleu_differs_from_the_grade_is_shown_disagreeing(make_run, api):
    plain = _partly_right()
    graded = direct_bleu(plain, references())
    runs = []
    for said in (graded + 0.004, graded + 7.5):  # honest (rounding), then a liar
        run = make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)
        client = worker_client(run)
        assert post(client, run, text_file([pieces(p) for p in plain])).status_code == 201
        r = client.post("/api/metrics/", [_bleu_point(run, said, 100)], format="json")
        assert r.status_code == 201, r.json()
        Run.objects.filter(pk=run.pk).update(state=Run.FINISHED, finished_at=timezone.now())
        runs.append(run)
    honest, liar = runs
    liar_says = api.get(f"/api/runs/{liar.pk}/").json()["evaluation"]
    assert liar_says["status"] == stored.EVALUATED
    assert liar_says["tolerance"] == stored.tolerance_of("val_bleu")
    [mismatch] = liar_says["mismatches"]
    assert mismatch["step"] == 100
    assert mismatch["reported"] == pytest.approx(graded + 7.5)
    assert mismatch["graded"] == pytest.approx(graded)
    assert api.get(f"/api/runs/{honest.pk}/").json()["evaluation"]["mismatches"] == []
    # the result reads the grade, never the run's word
    assert stored.load([liar])[0].accuracy_after_time() == pytest.approx(graded)


def test_the_real_set_is_graded_from_its_checksummed_archive(make_run, settings, monkeypatch):
    refs = [r for _, r in pairs(SEED, 5)]  # newstest2017-shaped, written by this test
    archive = newstest_archive(refs)
    folder = settings.MLBENCH_DATA_DIR / wmt17.FOLDER
    folder.mkdir(parents=True)
    (folder / wmt17.TEST_ARCHIVE).write_bytes(archive)
    monkeypatch.setattr(wmt17, "TEST_ARCHIVE_MD5", hashlib.md5(archive).hexdigest())
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=5)
    plain = refs[:4] + ["Ganz etwas anderes."]
    body = text_file([pieces(p) for p in plain], digest=digest_of_text(refs))
    r = post(worker_client(run), run, body, "dataset=wmt17")
    assert r.status_code == 201, r.json()
    assert r.json()["metrics"]["val_bleu"] == pytest.approx(direct_bleu(plain, refs))
    assert r.json()["dataset"] == "wmt17" and r.json()["signature"] == SIGNATURE


def test_a_wrong_checksum_leaves_the_file_ungraded_not_wrongly_graded(make_run, settings):
    refs = [r for _, r in pairs(SEED, 5)]
    folder = settings.MLBENCH_DATA_DIR / wmt17.FOLDER
    folder.mkdir(parents=True)
    (folder / wmt17.TEST_ARCHIVE).write_bytes(newstest_archive(refs))  # not WMT's MD5
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=5)
    body = text_file([pieces(r) for r in refs], digest=digest_of_text(refs))
    r = post(worker_client(run), run, body, "dataset=wmt17")
    assert r.status_code == 202 and r.json()["graded"] is False
    assert "wrong checksum" in r.json()["why"]
    assert grades(run) == [] and list(stored_files(run)) == ["predictions-step0000000100.npz"]


def test_extracted_files_without_the_archive_are_not_trusted(make_run, settings):
    refs = [r for _, r in pairs(SEED, 5)]
    folder = settings.MLBENCH_DATA_DIR / wmt17.FOLDER / "test"
    folder.mkdir(parents=True)
    (folder / wmt17.TEST_REFERENCE).write_text("".join(f"<seg id=1>{r}</seg>\n" for r in refs))
    run = make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=5)
    body = text_file([pieces(r) for r in refs], digest=digest_of_text(refs))
    r = post(worker_client(run), run, body, "dataset=wmt17")
    assert r.status_code == 202 and "keep it beside them" in r.json()["why"]
    assert grades(run) == []


def test_a_model_before_any_hypotheses_is_refused_and_nothing_is_stored(mt_run):
    # The audit itself: tests/api/test_translation_audit_api.py.
    r = worker_client(mt_run).post(
        f"/api/runs/{mt_run.pk}/model/?dataset=synthetic",
        b"onnx bytes",
        content_type="application/octet-stream",
    )
    assert r.status_code == 400, r.json()
    assert "has no predictions stored" in r.json()["errors"]["model"][0]
    assert not model_files.model_path(mt_run.pk).exists()
