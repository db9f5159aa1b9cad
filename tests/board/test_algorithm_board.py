"""GET /api/results/algorithms/: algorithms ranked by their study scores, per suite version
and condition (results/algorithm_board.py). Each algorithm has the score of the LATEST
ended study that scored it, linked, with the earlier ones named; a suite version is never
mixed with another; a study with a run pending, a cancelled one, or one from an origin
this installation does not trust is not ranked. The studies' runs are given graded
outcomes as tests/api/test_study_scores.py gives them (no worker runs)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run, Series, Study
from mlbench_master.bundles import signing, trust
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.shared.study_suite import SUITE_VERSION
from tests.bundles import data

pytestmark = pytest.mark.django_db

LONG_AGO = timezone.now() - dt.timedelta(hours=1)  # past the grace for late results
PATH = "/api/results/algorithms/"


@pytest.fixture
def api(db, settings, tmp_path, redis_settings) -> APIClient:
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    settings.MLBENCH_MAX_BANDWIDTH = 10000
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('alice', create_user=True)}")
    return client


def end(run: Run, reach_at: float | None, state: str = Run.FINISHED) -> None:
    """The run ended; the evaluator's grades reach the target (0.8) at `reach_at` s."""
    Run.objects.filter(pk=run.pk).update(
        state=state, started_at=LONG_AGO, finished_at=LONG_AGO,
        summary={"epochs": 2.0, "comm_bytes_to_target": 1000.0 * (reach_at or 0)},
    )  # fmt: skip
    evals = [(1.0, 0.4)] + ([(reach_at, 0.85)] if reach_at else [])
    for i, (seconds, accuracy) in enumerate(evals):
        meta = {"elapsed": seconds, "epoch": i + 1.0, "step": (i + 1) * 16}
        Metric.objects.create(run=run, name=graded_name("val_accuracy"), value=accuracy,
                              metadata=meta)  # fmt: skip


def study(api: APIClient, name: str, algorithms: list, conditions: list[str],
          times: dict[tuple[str, str], float | None], leave: int = 0) -> dict:  # fmt: skip
    """A study on logreg-epsilon, one seed, no held-out draw: each base run ended at
    times[(algorithm name, condition)] (None: a miss), except the last `leave` runs."""
    body = {"name": name, "algorithms": algorithms, "workloads": ["logreg-epsilon"],
            "conditions": conditions, "held_out": False, "reuse": False}  # fmt: skip
    created = api.post("/api/studies/", body, format="json")
    assert created.status_code == 201, created.content
    shown = created.json()
    cells = [(c["algorithm"].split(" ")[0], c["condition"], c["series"]) for c in shown["cells"]]
    for i, (algorithm, condition, series) in enumerate(cells):
        if i < len(cells) - leave:
            end(Run.objects.get(series_id=series), times[(algorithm, condition)])
    return api.get(f"/api/studies/{shown['id']}/").json()


def board(api: APIClient) -> dict:
    answer = api.get(PATH)
    assert answer.status_code == 200, answer.content
    return answer.json()


def section(body: dict, condition: str, version: str = SUITE_VERSION) -> dict:
    found = [
        s for s in body["sections"] if (s["suite_version"], s["condition"]) == (version, condition)
    ]
    assert len(found) == 1, [s["label"] for s in body["sections"]]
    return found[0]


def ranking(part: dict) -> list[tuple]:
    return [(e["rank"], e["algorithm"].split(" ")[0], e["study"]["id"]) for e in part["entries"]]


def test_each_algorithm_has_its_latest_studys_score_ranked_highest_first(api):
    older = study(api, "older", ["allreduce", "topk"], ["unlimited", "10mbit"], {
        ("allreduce", "unlimited"): 10.0, ("topk", "unlimited"): 20.0,
        ("allreduce", "10mbit"): 30.0, ("topk", "10mbit"): 15.0,
    })  # fmt: skip
    newer = study(api, "newer", ["allreduce", "powersgd"], ["unlimited"], {
        ("allreduce", "unlimited"): 12.0, ("powersgd", "unlimited"): 6.0,
    })  # fmt: skip
    assert older["score"] and newer["score"]
    body = board(api)
    assert "latest" in body["rule"] and "never the best" in body["rule"]
    fast = section(body, "unlimited")
    # powersgd is the best of the newer study (1); the all-reduce's 2 x its time there is
    # worth (4 - 2) / 3, its newer score, though its older one was 1; topk's 2/3 from the
    # older study ties with it and shares the rank.
    assert ranking(fast) == [
        (1, "powersgd", newer["id"]), (2, "allreduce", newer["id"]), (2, "topk", older["id"]),
    ]  # fmt: skip
    scores = {e["algorithm"].split(" ")[0]: e for e in fast["entries"]}
    assert scores["allreduce"]["score"] == pytest.approx(2 / 3)
    assert (
        scores["allreduce"]["score"]
        == newer["score"]["by_condition"]["unlimited"][scores["allreduce"]["algorithm"]]
    )
    assert [s["id"] for s in scores["allreduce"]["earlier_studies"]] == [older["id"]]
    link = scores["allreduce"]["study"]
    assert (link["page"], link["api"]) == (
        f"/studies/{newer['id']}/",
        f"/api/studies/{newer['id']}/",
    )
    assert [x.split(" ")[0] for x in link["compared_with"]] == ["powersgd"]
    assert scores["allreduce"]["workloads"]["logreg-epsilon"] == {"time": 12.0, "ratio": 2.0}
    assert scores["allreduce"]["held_out"] == {"applied": False, "passed": {}}
    assert scores["powersgd"]["origin"]["kind"] == "local" and scores["powersgd"]["unranked"] == ""
    assert fast["studies"] == sorted([older["id"], newer["id"]])  # joins two studies
    slow = section(body, "10mbit")
    assert ranking(slow) == [(1, "topk", older["id"]), (2, "allreduce", older["id"])]
    assert body["count"] == 5


def test_one_suite_version_is_never_mixed_with_another(api):
    old = study(api, "suite zero", ["allreduce", "topk"], ["unlimited"], {
        ("allreduce", "unlimited"): 30.0, ("topk", "unlimited"): 10.0,
    })  # fmt: skip
    Study.objects.filter(pk=old["id"]).update(suite_version="0")
    now = study(api, "suite one", ["allreduce", "topk"], ["unlimited"], {
        ("allreduce", "unlimited"): 10.0, ("topk", "unlimited"): 40.0,
    })  # fmt: skip
    body = board(api)
    assert [(s["suite_version"], s["condition"]) for s in body["sections"]] == [
        (SUITE_VERSION, "unlimited"), ("0", "unlimited"),
    ]  # fmt: skip
    one, zero = section(body, "unlimited"), section(body, "unlimited", "0")
    assert ranking(one) == [(1, "allreduce", now["id"]), (2, "topk", now["id"])]
    assert ranking(zero) == [(1, "topk", old["id"]), (2, "allreduce", old["id"])]
    # The older suite's study supersedes nothing of the newer one's, nor the reverse.
    assert all(not e["earlier_studies"] for e in one["entries"] + zero["entries"])
    assert one["studies"] == [now["id"]] and zero["studies"] == [old["id"]]


def test_pending_cancelled_and_unverified_studies_are_not_ranked(api):
    ended = study(api, "ended", ["allreduce", "topk"], ["unlimited"], {
        ("allreduce", "unlimited"): 10.0, ("topk", "unlimited"): 20.0,
    })  # fmt: skip
    pending = study(api, "pending", ["allreduce", "powersgd"], ["unlimited"], {
        ("allreduce", "unlimited"): 5.0, ("powersgd", "unlimited"): 1.0,
    }, leave=1)  # fmt: skip
    assert pending["pending_runs"] == 1 and pending["score"] is None
    cancelled = study(api, "cancelled", ["allreduce", "powersgd"], ["unlimited"], {
        ("allreduce", "unlimited"): 5.0, ("powersgd", "unlimited"): 1.0,
    }, leave=1)  # fmt: skip
    assert api.post(f"/api/studies/{cancelled['id']}/cancel/").status_code == 200
    # Ended with a score, but said to come from an installation whose key is not trusted.
    foreign = study(api, "foreign", ["allreduce", "powersgd"], ["unlimited"], {
        ("allreduce", "unlimited"): 5.0, ("powersgd", "unlimited"): 1.0,
    })  # fmt: skip
    Study.objects.filter(pk=foreign["id"]).update(
        origin={"study": 3, "fingerprint": "abcd:0123:4567:89ef"}
    )
    body = board(api)
    assert [(s["suite_version"], s["condition"]) for s in body["sections"]] == [
        (SUITE_VERSION, "unlimited")
    ]
    part = body["sections"][0]
    # A newer study still running does not replace the ended one's numbers.
    ranked = [e for e in part["entries"] if e["rank"] is not None]
    assert ranking({"entries": ranked}) == [(1, "allreduce", ended["id"]), (2, "topk", ended["id"])]
    assert all(not e["earlier_studies"] for e in ranked)
    shown = {e["study"]["id"] for e in part["entries"]}
    assert pending["id"] not in shown and cancelled["id"] not in shown
    unverified = [e for e in part["entries"] if e["rank"] is None]
    assert {e["study"]["id"] for e in unverified} == {foreign["id"]}
    assert all("unverified origin" in e["unranked"] for e in unverified)
    assert all(e["origin"]["trust"]["trusted"] is False for e in unverified)
    assert part["studies"] == [ended["id"]]


def test_an_imported_study_ranks_once_its_origin_is_trusted(api, settings, tmp_path):
    """A study from another installation through a real bundle: shown unranked while its
    key is not trusted here, ranked (and the latest) once an operator trusts it."""
    for name in ("origin", "here"):
        (tmp_path / name).mkdir()
    settings.MLBENCH_HOME = tmp_path / "origin"
    there = study(api, "travelled", ["allreduce", "topk"], ["unlimited"], {
        ("allreduce", "unlimited"): 20.0, ("topk", "unlimited"): 10.0,
    })  # fmt: skip
    bundle = data.export(api, f"/api/studies/{there['id']}/bundle/")
    key = signing.this_installation().public_key
    series = [c["series"] for c in there["cells"]]  # gone from here: the origin's rows
    Run.objects.filter(series_id__in=series).delete()
    Study.objects.filter(pk=there["id"]).delete()
    Series.objects.filter(pk__in=series).delete()
    settings.MLBENCH_HOME = tmp_path / "here"
    local = study(api, "local", ["allreduce", "topk"], ["unlimited"], {
        ("allreduce", "unlimited"): 10.0, ("topk", "unlimited"): 40.0,
    })  # fmt: skip
    answer = data.post_bundle(api, bundle)
    assert answer.status_code == 201, answer.content
    [imported] = answer.json()["studies"]

    part = section(board(api), "unlimited")
    assert ranking(part) == [
        (1, "allreduce", local["id"]), (2, "topk", local["id"]),
        (None, "allreduce", imported["id"]), (None, "topk", imported["id"]),
    ]  # fmt: skip
    shown = part["entries"][2]
    assert shown["origin"]["kind"] == "imported" and "unverified origin" in shown["unranked"]

    # Trusted, it ranks; "latest" is when a study was made (at its origin), not when it
    # arrived here: the local study, made after it, keeps both algorithms' numbers, and
    # names the imported one as the earlier study it supersedes.
    trust.add(key, "the origin", None)
    part = section(board(api), "unlimited")
    assert ranking(part) == [(1, "allreduce", local["id"]), (2, "topk", local["id"])]
    assert [s["id"] for s in part["entries"][0]["earlier_studies"]] == [imported["id"]]
    Study.objects.filter(pk=local["id"]).update(created_at=timezone.now() - dt.timedelta(days=1))
    part = section(board(api), "unlimited")
    assert ranking(part) == [(1, "topk", imported["id"]), (2, "allreduce", imported["id"])]
    assert part["entries"][0]["origin"]["trust"]["label"] == "trusted (the origin)"


def test_read_as_the_board_is(api, settings):
    anonymous = APIClient()
    assert anonymous.get(PATH).status_code in (401, 403)
    settings.MLBENCH_PUBLIC_READ = True
    empty = anonymous.get(PATH)
    assert empty.status_code == 200 and empty.json()["sections"] == []
