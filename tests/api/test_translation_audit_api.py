"""POST /api/runs/<id>/model/ for task 4b, on PostgreSQL: the master audits a translation
run's final model against the hypotheses it posted (shared/evaluation/translation_audit.py,
in the bounded child). An honest run matches; a run that posts the references as its
hypotheses is graded high by BLEU but its audit is a mismatch naming the row, shown on the
run as other tasks' failed audits are; a model off the contract or a precision the task
has not is refused with a 400 naming it, nothing stored."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Run
from mlbench_master.grading import model_files, scoring
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import grades, post
from tests.api.test_model_audit_api import audited, post_model
from tests.api.translation_bodies import SEED, TASK, N, text_file
from tests.evaluation.test_translation_audit import (
    exported,
    greedy_lines,
    references_as_pieces,
    with_metadata,
)

pytestmark = pytest.mark.django_db

assert (SEED, N) == (11, 40)  # the same test set as tests/evaluation/test_translation_audit.py


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"
    scoring.forget_evaluators()


@pytest.fixture
def mt_run(make_run):
    return make_run(state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)


def test_an_honest_translation_model_matches_and_shows_on_the_run(mt_run, api, settings):
    settings.MLBENCH_AUDIT_SAMPLE = 25  # of the 40 sentences: a seeded sample
    assert post(worker_client(mt_run), mt_run, text_file(greedy_lines())).status_code == 201
    r = post_model(worker_client(mt_run), mt_run, exported())
    assert r.status_code == 202, r.json()
    assert (r.json()["status"], r.json()["step"], r.json()["examples"]) == ("pending", 100, 25)
    result = audited(mt_run, timeout=120)
    assert (result["status"], result["differ"], result["sample"]) == ("matches", 0, True), result
    shown = api.get(f"/api/runs/{mt_run.pk}/").json()["evaluation"]["audit"]
    assert shown["status"] == "matches" and shown["model_bytes"] == len(exported())


def test_the_references_posted_as_hypotheses_grade_high_but_fail_the_audit(mt_run, api):
    assert post(worker_client(mt_run), mt_run, text_file(references_as_pieces())).status_code == 201
    bleu = [v for name, v, _ in grades(mt_run) if name == "evaluated_val_bleu"]
    assert bleu == [pytest.approx(100.0)]
    assert post_model(worker_client(mt_run), mt_run, exported()).status_code == 202
    result = audited(mt_run, timeout=120)
    assert (result["status"], result["differ"]) == ("mismatch", N), result
    assert "on 40 of 40 test sentences; the first, row 0: at piece 0" in result["why"]
    evaluation = api.get(f"/api/runs/{mt_run.pk}/").json()["evaluation"]
    assert evaluation["audit"]["status"] == "mismatch" and evaluation["audit"]["first_rows"][0] == 0


def test_one_changed_row_is_named(mt_run):
    lines = greedy_lines()
    lines[9] = (
        "▁Der ▁Hund " + lines[9] if not lines[9].startswith("▁Der") else "▁Die" + lines[9][4:]
    )
    assert post(worker_client(mt_run), mt_run, text_file(lines)).status_code == 201
    assert post_model(worker_client(mt_run), mt_run, exported()).status_code == 202
    result = audited(mt_run, timeout=120)
    assert (result["status"], result["first_rows"]) == ("mismatch", [9]), result
    assert "row 9: at piece 0" in result["why"]


@pytest.mark.parametrize(
    ("body", "query", "field", "words"),
    [
        (lambda: with_metadata(exported(), None), "", "model", "has no 'mlbench.sentencepiece"),
        (lambda: b"\x08\x07 not a model", "", "model", "not an ONNX model"),
        (exported, "&precision=bf16", "precision", "of a translation run: fp32, tf32"),
    ],
    ids=["no-vocabulary", "not-onnx", "bf16"],
)
def test_refusals_name_the_problem_and_store_nothing(mt_run, body, query, field, words):
    assert post(worker_client(mt_run), mt_run, text_file(greedy_lines())).status_code == 201
    r = post_model(worker_client(mt_run), mt_run, body(), query="dataset=synthetic" + query)
    assert r.status_code == 400, r.json()
    assert words in r.json()["errors"][field][0]
    assert not model_files.model_path(mt_run.pk).exists()
    assert model_files.audit_of(mt_run.pk) is None
