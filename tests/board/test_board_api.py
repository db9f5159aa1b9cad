"""GET /api/results/ on stored runs: sections kept apart (real and synthetic data,
evaluated and self-reported), one ranking rule for local and imported runs, every filter,
clear refusals, and anonymous reads only where the operator allows them."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.board.stored import TASK

pytestmark = pytest.mark.django_db


def _board(client: APIClient, **query) -> dict:
    response = client.get("/api/results/", query)
    assert response.status_code == 200, response.content
    return response.json()


def _ids(section: dict) -> list[int]:
    return [run["id"] for entry in section["entries"] for run in entry["runs"]]


def _section(body: dict, data: str, evaluation: str) -> dict:
    found = [s for s in body["sections"] if s["data"] == data and s["evaluation"] == evaluation]
    assert len(found) == 1, [s["label"] for s in body["sections"]]
    return found[0]


def test_sections_keep_synthetic_and_self_reported_apart_and_rank_imported_alike(stored, staff):
    body = _board(staff, task=TASK)
    runs = {role: run.pk for role, run in stored.runs.items()}
    keys = [(s["division"], s["measured"], s["data"], s["evaluation"]) for s in body["sections"]]
    assert keys == [
        ("closed", "time_to_target", "real", "evaluated"),
        ("closed", "time_to_target", "real", "self-reported"),
        ("closed", "time_to_target", "synthetic", "self-reported"),
    ]
    real = _section(body, "real", "self-reported")
    # The imported run (30 s) ranks by the same rule as the local ones; the synthetic run
    # (10 s, the fastest of all) and the evaluated one (50 s) are not in this ranking.
    assert _ids(real) == [runs["imported"], runs["two"], runs["one"], runs["missed"]]
    assert [e["rank"] for e in real["entries"]] == [1, 2, 3, None]
    assert real["entries"][3]["unranked"] == "no run reached the target"
    assert [e["score"] for e in real["entries"][:3]] == [30.0, 40.0, 60.0]
    assert "self-reported, not evaluated" in real["label"] and "real data" in real["label"]
    assert _ids(_section(body, "synthetic", "self-reported")) == [runs["synthetic"]]
    graded = _section(body, "real", "evaluated")
    assert _ids(graded) == [runs["graded"]] and graded["entries"][0]["rank"] == 1
    assert "evaluated by the platform" in graded["label"]


def test_an_entry_shows_its_dimensions_origin_cost_and_links(stored, staff):
    body = _board(staff, task=TASK)
    entries = {e["runs"][0]["id"]: e for s in body["sections"] for e in s["entries"]}
    imported = entries[stored.runs["imported"].pk]
    assert imported["origin"]["kind"] == "imported"
    assert imported["origin"]["fingerprint"] == stored.origin_fingerprint
    assert imported["origin"]["origin_run"] == stored.origin_run
    assert stored.origin_fingerprint != body["installation"]["fingerprint"]
    local = entries[stored.runs["one"].pk]
    assert local["origin"] == {
        "kind": "local",
        "fingerprint": body["installation"]["fingerprint"],
        "public_key": None,
        "imported_at": None,
        "trust": {"status": "local", "trusted": True, "name": None, "label": "local"},
    }
    assert imported["origin"]["trust"]["label"] == "trusted (the board tests' origin)"
    assert (local["test_examples"], local["whole_test_set"]) == (100_000, 100_000)
    assert local["graded_on"] == "graded on the whole test set (100,000 examples)"
    assert (local["workers"], local["backend"], local["network"]) == (1, "gloo", "100 Mbit/s")
    assert local["hardware"].startswith("CPU x, ")
    assert local["seeds"] == [2] and local["statistics"]["valid"] is True
    assert local["statistics"]["time_to_target"]["median"] == 60.0
    assert local["cost"]["priced"] == 0 and local["cost"]["reason"].startswith("not priced")
    pk = stored.runs["one"].pk
    assert local["links"]["runs"][0] == {
        "id": pk,
        "page": f"/runs/{pk}/",
        "api": f"/api/runs/{pk}/",
        "bundle": f"/api/runs/{pk}/bundle/",
        "mllog": f"/api/runs/{pk}/mllog/",
    }
    for link in ("api", "bundle", "mllog"):
        assert staff.get(local["links"]["runs"][0][link]).status_code == 200, link


@pytest.mark.parametrize(
    ("query", "roles"),
    [
        ({"workers": "1"}, ["one"]),
        ({"workers": "4"}, ["missed"]),
        ({"seed": "3"}, ["missed"]),
        ({"backend": "GLOO"}, ["one"]),
        ({"network": "100 Mbit/s"}, ["one"]),
        ({"origin": "imported"}, ["imported"]),
        ({"data": "synthetic"}, ["synthetic"]),
        ({"evaluation": "evaluated"}, ["graded"]),
        ({"division": "open"}, []),
        ({"measured": "accuracy_after_time"}, []),
        ({"algorithm": "powersgd"}, []),  # a bogus one: test_board_filters_named.py
        ({"implementation": "spark"}, []),
        ({"hardware": "GPU y, 1 core per worker"}, []),
    ],
)
def test_each_filter_narrows_the_board(stored, staff, query, roles):
    body = _board(staff, task=TASK, **query)
    found = sorted(run["id"] for s in body["sections"] for e in s["entries"] for run in e["runs"])
    assert found == sorted(stored.runs[r].pk for r in roles)
    assert body["filters"] == {
        "task": TASK,
        **{k: int(v) if k in ("workers", "seed") else v for k, v in query.items()},
    }


def test_text_filters_take_an_entry_own_words(stored, staff):
    whole = _board(staff, task=TASK)
    every = [e for s in whole["sections"] for e in s["entries"]]
    for name in ("hardware", "algorithm", "implementation", "backend", "network"):
        value = every[0][name]
        narrowed = [e for s in _board(staff, **{name: value})["sections"] for e in s["entries"]]
        assert narrowed and all(e[name] == value for e in narrowed), name
    origin = _board(staff, origin=stored.origin_fingerprint)
    assert [e["origin"]["kind"] for s in origin["sections"] for e in s["entries"]] == ["imported"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"task": "chess"}, "task"),
        ({"division": "middle"}, "division"),
        ({"measured": "speed"}, "measured"),
        ({"data": "fake"}, "data"),
        ({"evaluation": "maybe"}, "evaluation"),
        ({"workers": "two"}, "workers"),
        ({"seed": "-1"}, "seed"),
        ({"backend": "x" * 301}, "backend"),
    ],
)
def test_a_wrong_filter_is_named(staff, db, query, named):
    response = staff.get("/api/results/", query)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"{named}: "), response.json()


def test_anonymous_reads_only_where_allowed_and_never_writes(stored, settings):
    anonymous = APIClient()
    settings.MLBENCH_PUBLIC_READ = False
    assert anonymous.get("/api/results/").status_code == 401  # no token: not authenticated
    settings.MLBENCH_PUBLIC_READ = True
    body = _board(anonymous, task=TASK)
    assert sum(len(s["entries"]) for s in body["sections"]) == 6
    # Public reads make no writer: still 401 (the permission is checked before the method).
    assert anonymous.post("/api/results/", {}, format="json").status_code == 401


def test_a_run_off_its_algorithms_recipe_compares_in_the_open_division(stored, staff):
    run = stored.runs["one"]
    assert run.division == "closed"
    run.algorithm, run.algorithm_options = "powersgd", {"rank": 4}  # the recipe's is 2
    run.save(update_fields=["algorithm", "algorithm_options"])
    body = _board(staff, task=TASK, division="open")
    entries = [e for s in body["sections"] for e in s["entries"]]
    assert [r["id"] for e in entries for r in e["runs"]] == [run.pk]
    assert {s["division"] for s in body["sections"]} == {"open"}
    closed = _board(staff, task=TASK, division="closed")
    assert run.pk not in [
        r["id"] for s in closed["sections"] for e in s["entries"] for r in e["runs"]
    ]
