"""`mlbench evaluate RUN` on a translation run (task 4b): its stored hypotheses scored again
in the client's process against references it regenerates, the BLEU and sacrebleu's
signature compared with the master's. Over a live web server, posted as a worker posts."""

from __future__ import annotations

import pytest
import requests

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run
from mlbench_master.grading import scoring
from mlbench_master.runs import lifecycle
from mlbench_worker.client.cli import accuracy, main, static_board
from tests.api.translation_bodies import (
    SEED,
    SIGNATURE,
    TASK,
    N,
    direct_bleu,
    pieces,
    references,
    text_file,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _post(live_server, run: Run, body: bytes) -> None:
    r = requests.post(
        f"{live_server.url}/api/runs/{run.pk}/predictions/?dataset=synthetic",
        data=body,
        headers={
            "Authorization": f"Token {lifecycle.worker_token(run)}",
            "Content-Type": "application/octet-stream",
        },
        timeout=60,
    )
    assert r.status_code == 201, r.text


def test_evaluate_scores_the_hypotheses_again_with_the_same_bleu(live_server, capsys, settings):
    settings.MLBENCH_DATA_DIR = "/nonexistent"
    scoring.forget_evaluators()
    run = Run.objects.create(name="mt", state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)
    plain = [" ".join(r.split()[:-1]) for r in references()]  # each loses its last word
    _post(live_server, run, text_file([pieces(p) for p in plain]))
    Metric.objects.create(run=run, name="val_bleu", value=12.5, metadata={"step": 100})
    token = issue_user_token("alice", create_user=True)
    cli = ["--url", live_server.url, "--token", token, "evaluate", str(run.pk)]

    assert main(cli) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("100 ")]
    graded = f"{direct_bleu(plain, references()):.2f}"
    assert row.count(graded) == 2 and row.rstrip().endswith("12.50")  # here, master's, its own
    assert f"BLEU here: sacrebleu {SIGNATURE}; the master's: {SIGNATURE}" in out
    assert "every grade equals the master's" in out

    # A stored grade of another BLEU (its signature changed) is not the master's grade here.
    Metric.objects.filter(run=run, name="evaluated_val_bleu").update(
        metadata={"step": 100, "epoch": 1.5, "elapsed": 30.25, "signature": "tok:intl"}
    )
    assert main(cli) == 1
    assert "DISAGREES with the master's stored grade at step 100" in capsys.readouterr().out


def test_the_cli_shows_a_translation_runs_grades_as_bleu():
    run = {
        "id": 4,
        "evaluation": {
            "status": "evaluated", "metric": "val_bleu", "grades": 2, "tolerance": 0.05,
            "accuracy_after_time": 23.456, "time_to_target": None,
            "mismatches": [{"step": 100, "reported": 30.0, "graded": 23.456}],
        },
    }  # fmt: skip
    assert "last BLEU 23.46, target not reached" in accuracy.evaluation_line(run)
    [note] = accuracy.evaluation_notes(run)
    assert "it reported BLEU 30.00, the evaluator graded BLEU 23.46 (tolerance 0.05 BLEU)" in note
    entry = {"score": 21.5, "measured": "accuracy_after_time", "goal": {"metric": "val_bleu"}}
    assert static_board.score_text(entry) == "BLEU 21.50 after time (median)"
