"""`mlbench evaluate RUN`: the run's stored predictions graded again in the client's own
process, against labels it regenerates itself, beside the master's grade and the run's word.
Over a live web server, with the predictions posted as a worker posts them."""

from __future__ import annotations

import pytest
import requests

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run
from mlbench_master.grading import scoring
from mlbench_master.runs import lifecycle
from mlbench_worker.client.cli import main
from mlbench_worker.shared.evaluation import generated_labels
from tests.api.predictions_bodies import SEED, N, cifar_file

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


def _cli(live_server, *args: str) -> list[str]:
    token = issue_user_token("alice", create_user=True)
    return ["--url", live_server.url, "--token", token, *args]


def test_evaluate_grades_the_stored_predictions_again_here(live_server, capsys, settings):
    settings.MLBENCH_DATA_DIR = "/nonexistent"
    scoring.forget_evaluators()
    run = Run.objects.create(
        name="graded", state=Run.STARTED, task="resnet20-cifar10", seed=SEED, test_examples=N
    )
    _post(live_server, run, cifar_file(step=100))
    _post(live_server, run, cifar_file(step=200, wrong=[]))
    Metric.objects.create(run=run, name="val_accuracy", value=0.99, metadata={"step": 100})

    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert "98.0%" in rows["100"] and "99.0%" in rows["100"]  # graded 490/500; it said 99 %
    assert rows["200"].count("100.0%") == 2 and rows["200"].rstrip().endswith("-")
    assert "every grade equals the master's" in out

    # A stored grade that is not what the file earns (a master tampered with) is caught.
    Metric.objects.filter(run=run, name="evaluated_val_accuracy", metadata__step=200).update(
        value=0.5
    )
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    assert "DISAGREES with the master's stored grade at step 200" in capsys.readouterr().out


def test_evaluate_says_why_it_cannot(live_server, capsys):
    bare = Run.objects.create(name="bare", state=Run.FINISHED, task="resnet20-cifar10", seed=1)
    assert main(_cli(live_server, "evaluate", str(bare.pk))) == 1
    assert f"run {bare.pk} has no predictions stored" in capsys.readouterr().err

    # Files of a real set, and no --data-dir here: told what to give.
    run = Run.objects.create(
        name="real", state=Run.STARTED, task="resnet20-cifar10", seed=SEED, test_examples=N
    )
    _post(live_server, run, cifar_file())
    # The generated set of another seed is not this run's: its labels were drawn otherwise.
    Run.objects.filter(pk=run.pk).update(seed=SEED + 1)
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 1
    err = capsys.readouterr().err
    assert "are of no test set found here" in err and "give --data-dir" in err
    assert (
        generated_labels.cifar10(SEED + 1, N).tolist() != generated_labels.cifar10(SEED, N).tolist()
    )


def test_evaluate_regrades_task_2_with_the_width_the_master_recorded(live_server, capsys):
    """Task 2's generated labels depend on the rows' width: the master keeps the `features`
    it graded with beside the grade, so the run is graded again on the same set."""
    from mlbench_worker.shared.evaluation.predictions import digest_of
    from tests.api.predictions_bodies import npz

    scoring.forget_evaluators()
    run = Run.objects.create(
        name="t2", state=Run.STARTED, task="logreg-epsilon", seed=SEED, test_examples=400
    )
    labels = generated_labels.epsilon(SEED, 400, 50)
    guessed = labels.copy()
    guessed[:100] *= -1  # 300 of 400 right
    r = requests.post(
        f"{live_server.url}/api/runs/{run.pk}/predictions/?dataset=synthetic&features=50",
        data=npz(digest=digest_of(labels), step=7, predicted_label=guessed),
        headers={
            "Authorization": f"Token {lifecycle.worker_token(run)}",
            "Content-Type": "application/octet-stream",
        },
        timeout=60,
    )
    assert r.status_code == 201 and r.json()["metrics"]["val_accuracy"] == 0.75, r.text
    assert main(_cli(live_server, "evaluate", str(run.pk))) == 0
    out = capsys.readouterr().out
    assert "75.0%" in next(line for line in out.splitlines() if line.startswith("7 "))
