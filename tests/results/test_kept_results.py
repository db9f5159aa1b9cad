"""The kept results and board entries (results/models.py) equal what a read would make
now, for every kind of run, and stop being read the moment what they were made of
changes, whoever changes it.

Every kind: finished (reaching its target or not), failed without a summary, graded by the
evaluator, disagreeing with its grades, a series with a run still queued, generated data, a
time budget, task 3's perplexity, task 4b's BLEU, and runs imported from another
installation: re-graded here and agreeing, disputed (a forged grade), and signed by a key
this installation does not trust. Kept and fresh are compared as the API answers them:
the whole board, its pages, and each run's kept result against one made from its points.

The rule a run's own token meets after its end (runs/frozen.py) is tested here from the
board's side: what the platform refuses leaves the kept rows as they were; what it takes
(a point measured before the end, in the grace) shows at once.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_master.bundles import signing, trust
from mlbench_master.grading import model_files, scoring
from mlbench_master.results import board, convergence, kept_runs
from mlbench_master.results.models import StoredEntry, StoredResult
from mlbench_master.runs import lifecycle
from mlbench_worker.shared.evaluation import graded_name
from tests.api.predictions_bodies import CIFAR, SEED, N, cifar_file
from tests.board.stored import NEVER, evals
from tests.bundles import data
from tests.bundles.conftest import Installations
from tests.bundles.test_trust import forge, graded, public_of
from tests.results.conftest import START, Maker
from tests.summaries import summary_body

pytestmark = pytest.mark.django_db
TASK = "logreg-epsilon"


def forget() -> None:
    """Nothing kept: the next read makes every result and entry."""
    StoredEntry.objects.all().delete()
    StoredResult.objects.update(made=None)
    board._RANKED.clear()  # and what a process keeps of them (both exact, both emptied)
    convergence._FOUND.clear()


def whole(**query) -> dict:
    return board.board(board.Filters(**query))


def entry_of(answer: dict, run: Run) -> dict:
    found = [e for s in answer["sections"] for e in s["entries"]
             if run.pk in [r["id"] for r in e["runs"]]]  # fmt: skip
    assert len(found) == 1, [e["id"] for s in answer["sections"] for e in s["entries"]]
    return found[0]


@pytest.fixture
def installations(settings, tmp_path) -> Installations:
    settings.MLBENCH_PUBLIC_READ = False
    scoring.forget_evaluators()
    return Installations(settings, tmp_path)


@pytest.fixture
def every_kind(staff_api, installations) -> dict[str, Run]:
    """One run (or series) of every kind, local and imported (the module docstring)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    series = data.finished_series(staff_api)  # task 1a, graded from real predictions files
    genuine = data.export(staff_api, f"/api/series/{series.pk}/bundle/")
    origin = signing.this_installation()
    stranger = Ed25519PrivateKey.generate()
    series.delete()
    installations.use("here")
    for body in (genuine, forge(genuine, stranger, graded(value=0.999))):
        assert data.post_bundle(staff_api, body).status_code == 201
    trust.add(origin.public_key, "the origin", None)  # the forged one's key stays unknown
    make = Maker(staff_api).run
    runs = {
        "reached": make(None, 1, 2, evals(40.0), task=TASK, dataset="epsilon"),
        "missed": make(None, 2, 4, NEVER, task=TASK, dataset="epsilon"),
        "failed": make(None, 3, 1, evals(30.0), task=TASK, state=Run.FAILED, summary=False),
        "graded": make(None, 4, 2, evals(50.0), task=TASK, dataset="epsilon",
                       graded=[0.5, 0.85, 0.86]),
        "disagrees": make(None, 5, 2, evals(20.0), task=TASK, dataset="epsilon",
                          graded=[0.4, 0.6, 0.7]),
        "synthetic": make(None, 6, 2, evals(10.0), task=TASK),
        "perplexity": make(None, 7, 1, [(10.0, 400.0, 1), (20.0, 85.0, 2)],
                           task="awd-lstm-wikitext2", target_value=90.0, dataset="wikitext2"),
    }  # fmt: skip
    maker = Maker(staff_api)
    pending = maker.series(task=TASK, seeds=[8, 9], worker_counts=[2])
    runs["series"] = maker.run(pending, 8, 2, evals(35.0), task=TASK, dataset="epsilon")
    runs["queued"] = Run.objects.create(name="waits", task=TASK, series=pending, seed=9,
                                        num_workers=2, state=Run.QUEUED)  # fmt: skip
    budget = maker.run(None, 10, 2, evals(45.0), task=TASK, dataset="epsilon")
    Run.objects.filter(pk=budget.pk).update(time_budget=60)
    runs["budget"] = budget
    runs["bleu"] = _bleu_run(maker)
    imported = list(Run.objects.filter(origin__isnull=False).order_by("id"))
    runs["agrees"] = next(r for r in imported if r.origin.origin_key == origin.public_key)
    runs["forged"] = next(r for r in imported if r.origin.origin_key == public_of(stranger))
    return {role: Run.objects.get(pk=run.pk) for role, run in runs.items()}


def _bleu_run(maker: Maker) -> Run:
    """Task 4b, self-reported BLEU 18 then 24 and graded 17.9 then 24.02 (sacrebleu's
    signature on the grade, as the evaluator stores it)."""
    run = maker.run(None, 11, 2, [(30.0, 18.0, 1.0), (60.0, 24.0, 2.0)],
                    task="transformer-wmt17", target_value=20.0, dataset="synthetic")  # fmt: skip
    for i, value in enumerate((17.9, 24.02)):
        Metric.objects.create(
            run=run, name=graded_name("val_bleu"), value=value,
            date=START + dt.timedelta(seconds=31 + 30 * i),
            metadata={"epoch": i + 1.0, "step": (i + 1) * 10, "elapsed": 30.0 * (i + 1),
                      "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3"},
        )  # fmt: skip
    return run


def test_every_kind_of_run_reads_the_same_kept_and_fresh(every_kind):
    forget()
    fresh = whole()
    fresh_pages = board.board(board.Filters(task=TASK), board.Page(3, 2), fresh=True)
    forget()
    assert whole() == fresh  # made and kept
    kept = StoredEntry.objects.count()
    assert kept >= len(every_kind) - 2  # the series with a queued run is made at each read
    assert whole() == fresh  # read back: nothing made again
    assert StoredEntry.objects.count() == kept
    assert board.board(board.Filters(task=TASK), board.Page(3, 2)) == fresh_pages
    for task in {r.task for r in every_kind.values()}:
        assert whole(task=task) == board.board(board.Filters(task=task), fresh=True)
    kinds = {e["evaluation"] for s in fresh["sections"] for e in s["entries"]}
    assert kinds == {"evaluated", "self-reported"}
    statuses = {e["regrade"]["status"] for s in fresh["sections"] for e in s["entries"]}
    assert {"local", "agrees", "disputed"} <= statuses
    assert entry_of(fresh, every_kind["forged"])["rank"] is None
    assert entry_of(fresh, every_kind["agrees"])["origin"]["trust"]["status"] == "trusted"
    assert entry_of(fresh, every_kind["series"])["statistics"]["pending"] == 1


def test_each_kept_run_result_equals_one_made_from_its_points(every_kind):
    runs = list(Run.objects.filter(pk__in=[r.pk for r in every_kind.values()]).order_by("id"))
    forget()
    first = kept_runs.of_runs(runs)  # made, and kept where the run ended
    ended = [r for r in runs if r.state in Run.FINAL_STATES]
    rows = dict(StoredResult.objects.filter(run__in=ended).values_list("run_id", "made"))
    versions = dict(StoredResult.objects.filter(run__in=ended).values_list("run_id", "version"))
    assert rows == versions  # each ended run's result kept at its current version
    assert StoredResult.objects.get(run=every_kind["queued"]).made is None  # not ended
    assert kept_runs.of_runs(runs) == first == kept_runs.compute(runs)
    agrees = first[every_kind["agrees"].pk]
    assert agrees.here is not None and agrees.here.evaluation == "evaluated"
    assert first[every_kind["disagrees"].pk].result.mismatches == 3
    assert first[every_kind["bleu"].pk].result.accuracy_after_time == 24.02
    assert first[every_kind["failed"].pk].result.state == Run.FAILED


def test_a_new_grade_shows_at_once(every_kind, staff_api):
    """A grade made by the evaluator from a posted predictions file (while the run is
    active: an ended run's results are frozen) shows on the series' entry at once, and so
    after the run ends, kept; a grade stored on an ended run by any writer (here the ORM,
    as the intake stores it) shows at once too."""
    maker = Maker(staff_api)
    series = maker.series(task=CIFAR, seeds=[SEED], worker_counts=[1])
    run = maker.run(series, SEED, 1, data.EVALS, task=CIFAR, target_value=0.9, state=Run.STARTED)
    Run.objects.filter(pk=run.pk).update(test_examples=N, finished_at=None)
    assert entry_of(whole(), run)["evaluation"] == "self-reported"
    posted = staff_api.post(
        f"/api/runs/{run.pk}/predictions/?dataset=synthetic",
        cifar_file(step=10),
        content_type="application/octet-stream",
    )
    assert posted.status_code == 201, posted.content
    shown = entry_of(whole(), run)
    assert shown["evaluation"] == "evaluated" and shown["test_examples"] == N
    lifecycle.mark_finished(Run.objects.get(pk=run.pk), 0)
    assert entry_of(whole(), run) == entry_of(whole(), run)  # kept, then read back
    assert StoredEntry.objects.filter(key=f"series-{series.pk}-x1").exists()
    ended = every_kind["reached"]
    assert entry_of(whole(), ended)["evaluation"] == "self-reported"
    Metric.objects.create(run=ended, name=graded_name("val_accuracy"), value=0.86,
                          date=START + dt.timedelta(seconds=71),
                          metadata={"epoch": 2.0, "step": 20, "elapsed": 40.0})  # fmt: skip
    after = entry_of(whole(), ended)
    assert after["evaluation"] == "evaluated" and after["runs"][0]["time_to_target"] == 40.0
    assert after == entry_of(board.board(board.Filters(), fresh=True), ended)


def test_a_disagreement_shows_at_once(every_kind):
    run = every_kind["agrees"]
    before = entry_of(whole(), run)
    assert before["regrade"]["status"] == "agrees" and before["rank"] is not None
    verdict = dict(run.origin.regrade)
    steps = [
        dict(s, agrees=False, here={graded_name("val_accuracy"): 0.1}) for s in verdict["steps"]
    ]
    RunOrigin.objects.filter(run=run).update(regrade={**verdict, "steps": steps})
    after = entry_of(whole(), run)
    assert after["regrade"]["status"] == "disputed" and after["rank"] is None
    assert after["unranked"].startswith("disputed: ")


def test_an_import_a_deletion_and_a_trusted_key_show_at_once(every_kind, staff_api, installations):
    before = whole()
    installations.use("third")
    far = Maker(staff_api).run(None, 21, 2, evals(25.0), task=TASK, dataset="epsilon")
    bundle = data.export(staff_api, f"/api/runs/{far.pk}/bundle/")
    third = signing.this_installation()
    far.delete()
    installations.use("here")
    assert data.post_bundle(staff_api, bundle).status_code == 201
    imported = Run.objects.get(origin__origin_key=third.public_key)
    grown = whole()
    assert grown["count"] == before["count"] + 1
    assert entry_of(grown, imported)["unranked"].startswith("unverified origin")
    trust.add(third.public_key, "the third", None)
    assert entry_of(whole(), imported)["rank"] is not None
    gone = every_kind["series"]
    assert staff_api.delete(f"/api/runs/{gone.pk}/").status_code in (200, 204)
    after = whole()
    assert gone.pk not in [
        r["id"] for s in after["sections"] for e in s["entries"] for r in e["runs"]
    ]
    assert after == board.board(board.Filters(), fresh=True)


def test_a_summary_in_the_grace_and_an_audit_record_show_at_once(every_kind, staff_api):
    run = every_kind["failed"]  # ended without a summary: one may still come in the grace
    assert entry_of(whole(), run)["hardware"].startswith("CPU (model not recorded)")
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    body = summary_body(TASK, dataset="epsilon", reached=False,
                        hardware={"cpu_model": "Test CPU 9000", "cpu_count": 2})  # fmt: skip
    assert worker.post(f"/api/runs/{run.pk}/summary/", body, format="json").status_code == 200
    assert entry_of(whole(), run)["hardware"].startswith("CPU Test CPU 9000")
    lm = every_kind["perplexity"]
    said = entry_of(whole(), lm)["graded_on"]
    folder = model_files.folder(lm.pk)
    folder.mkdir(parents=True)
    model_files.write_audit(folder, {"status": "matches", "graded": {"tokens": 1234}})
    assert entry_of(whole(), lm)["graded_on"] != said
    assert entry_of(whole(), lm)["test_examples"] == 1234


def test_other_code_makes_every_result_again(every_kind, monkeypatch):
    answer = whole()
    monkeypatch.setattr(kept_runs, "CODE", "0" * 16)
    assert whole() == answer
    assert set(StoredEntry.objects.values_list("signature", flat=True)) == {
        s for s in StoredEntry.objects.values_list("signature", flat=True) if s.startswith("0" * 16)
    }
    assert set(StoredResult.objects.exclude(made=None).values_list("code", flat=True)) == {"0" * 16}


def _ended_just_now(run: Run) -> tuple[Run, dt.datetime, APIClient]:
    """`run` ended 5 s ago after 5 minutes, and a client with its own worker token."""
    ended = timezone.now() - dt.timedelta(seconds=5)
    Run.objects.filter(pk=run.pk).update(
        finished_at=ended, started_at=ended - dt.timedelta(minutes=5)
    )
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    return Run.objects.get(pk=run.pk), ended, worker


def _point(run: Run, name: str, value: float, step: int, date: dt.datetime, elapsed: float):
    return {"run_id": run.pk, "name": name, "value": value, "date": date.isoformat(),
            "metadata": {"epoch": step / 10, "step": step, "elapsed": elapsed}}  # fmt: skip


def test_what_a_run_posts_after_its_end_never_changes_its_kept_result(maker, settings):
    """The run's own token after the end: a point dated after it, a second evaluation of a
    step and a second summary are refused (409), and nothing kept changes (its version is
    not raised: nothing was written); past the grace the token is refused (401)."""
    settings.MLBENCH_RUN_TOKEN_GRACE = 600
    run, ended, worker = _ended_just_now(
        maker.run(None, 1, 2, evals(40.0), task=TASK, dataset="epsilon")
    )
    before, version = whole(), StoredResult.objects.get(run=run).version
    late = _point(run, "val_accuracy", 0.99, 90, timezone.now(), 50.0)  # dated after the end
    again = _point(run, "val_accuracy", 0.99, 20, ended - dt.timedelta(seconds=60), 40.0)
    summary = summary_body(TASK, dataset="epsilon", hardware={"cpu_model": "forged"})
    for path, body in (("/api/metrics/", late), ("/api/metrics/", [again]),
                       (f"/api/runs/{run.pk}/summary/", summary)):  # fmt: skip
        answer = worker.post(path, body, format="json")
        assert answer.status_code == 409, answer.content
    assert StoredResult.objects.get(run=run).version == version
    assert whole() == before
    Run.objects.filter(pk=run.pk).update(finished_at=ended - dt.timedelta(seconds=601))
    past = whole()
    early = _point(run, "val_accuracy", 0.99, 50, ended - dt.timedelta(seconds=700), 70.0)
    assert worker.post("/api/metrics/", early, format="json").status_code == 401
    assert whole() == past


def test_the_last_points_of_a_run_in_its_grace_show_at_once(maker, settings):
    """What the rule lets a run's token still post after the end (its last points, measured
    before it, in the grace) changes its result at once: a run that posted no summary and
    whose reaching evaluation and time to target arrive late."""
    settings.MLBENCH_RUN_TOKEN_GRACE = 600
    run, ended, worker = _ended_just_now(
        maker.run(None, 2, 2, NEVER, task=TASK, dataset="epsilon", summary=False)
    )
    assert entry_of(whole(), run)["score"] is None
    measured = ended - dt.timedelta(seconds=30)
    points = [_point(run, "val_accuracy", 0.87, 40, measured, 60.0),
              _point(run, "time_to_target", 60.0, 40, measured, 60.0)]  # fmt: skip
    assert worker.post("/api/metrics/", points, format="json").status_code == 201
    shown = entry_of(whole(), run)
    assert shown["score"] == 60.0 and shown["rank"] is not None
    assert shown == entry_of(board.board(board.Filters(), fresh=True), run)
