"""Task 4b in the catalogue-driven places of the master: the defaults the form and the CLI
read offer it, a run and a series of it are accepted as any task's are (the worker told its
seed and test sentences), its graded-on unit is sentences, and the board ranks its runs by
their graded BLEU, higher first."""

import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.run_rules import test_set as test_set_rules
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import catalogue
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import post
from tests.api.translation_bodies import SEED, TASK, N, pieces, references, text_file

pytestmark = pytest.mark.django_db


def test_the_defaults_offer_the_task_with_its_bleu_goals(api):
    offered = api.get("/api/runs/defaults/").json()["tasks"][TASK]
    assert offered["goals"] == ["light", "standard"] and "synthetic" in offered["datasets"]
    assert {g.metric for g in catalogue.get(TASK).goals.values()} == {"val_bleu"}
    assert test_set_rules.unit(catalogue.get(TASK)) == "sentences"


def test_a_series_of_translation_runs_is_queued_with_its_test_set(api, redis_settings):
    body = {
        "name": "mt", "task": TASK, "dataset": "synthetic", "seeds": [1, 2], "workers": [2],
        "test_examples": N, "time_budget": 60,
    }  # fmt: skip
    response = api.post("/api/series/", body, format="json")
    assert response.status_code == 201, response.content
    first = Run.objects.get(pk=response.json()["runs"][0]["id"])
    argv = worker_argv(lifecycle.run_spec(first))
    assert argv[3] == TASK and argv[argv.index("--test-images") + 1] == str(N)
    assert argv[argv.index("--seed") + 1] == "1"


def test_the_board_ranks_translation_runs_by_their_graded_bleu(make_run, api):
    scores = {}
    for drop in (1, 3):  # hypotheses losing their last word, or last three
        run = make_run(
            state=Run.STARTED, task=TASK, seed=SEED, test_examples=N, dataset="synthetic",
            time_budget=60, target="light", num_workers=2,
        )  # fmt: skip
        plain = [" ".join(r.split()[:-drop]) for r in references()]
        r = post(worker_client(run), run, text_file([pieces(p) for p in plain]))
        assert r.status_code == 201, r.json()
        scores[run.pk] = r.json()["metrics"]["val_bleu"]
        Run.objects.filter(pk=run.pk).update(
            state=Run.FINISHED, finished_at=timezone.now(), dataset_used="synthetic"
        )
    answer = api.get("/api/results/", {"task": TASK}).json()
    [section] = answer["sections"]
    entries = section["entries"]
    assert [e["runs"][0]["id"] for e in entries] == sorted(scores, key=scores.get, reverse=True)
    assert [e["score"] for e in entries] == pytest.approx(sorted(scores.values(), reverse=True))
    assert [e["rank"] for e in entries] == [1, 2]
    assert all(e["evaluation"] == "evaluated" and not e["lower_is_better"] for e in entries)
    assert "sentences" in entries[0]["graded_on"], entries[0]["graded_on"]
