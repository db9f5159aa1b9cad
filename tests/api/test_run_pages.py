"""GET /api/runs/'s bounded reads (a page: limit, offset; the picked runs: id) beside the
whole list the original platform answers, which stays as it was; and their bad input,
each a 400 naming the parameter."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def seven(make_run) -> list[Run]:
    """Seven runs, newest first (as the list orders them)."""
    made = [make_run(name=f"run {i}", state=Run.FINISHED) for i in range(7)]
    return made[::-1]


def ids(rows: list[dict]) -> list[int]:
    return [r["id"] for r in rows]


def test_the_whole_list_is_the_original_answer(api, seven):
    """No parameter: a plain array of every run, newest first, each as GET /api/runs/<id>/."""
    body = api.get("/api/runs/").json()
    assert isinstance(body, list) and ids(body) == [r.pk for r in seven]
    assert body[2] == api.get(f"/api/runs/{seven[2].pk}/").json()


def test_pages_walk_the_whole_list_in_its_order(api, seven):
    whole = api.get("/api/runs/").json()
    first = api.get("/api/runs/?limit=3").json()
    assert set(first) == {"count", "offset", "limit", "next_offset", "results"}
    assert (first["count"], first["offset"], first["limit"], first["next_offset"]) == (7, 0, 3, 3)
    assert first["results"] == whole[:3]  # the same runs, the same shape
    seen, offset = [], 0
    while offset is not None:
        page = api.get(f"/api/runs/?limit=3&offset={offset}").json()
        seen += page["results"]
        offset = page["next_offset"]
    assert seen == whole
    beyond = api.get("/api/runs/?limit=3&offset=70").json()
    assert beyond["results"] == [] and beyond["next_offset"] is None and beyond["count"] == 7


def test_picked_runs_by_id_in_the_lists_order(api, seven):
    whole = {r["id"]: r for r in api.get("/api/runs/").json()}
    a, b, c = seven[5].pk, seven[0].pk, seven[3].pk
    body = api.get(f"/api/runs/?id={a},{b}&id={c}").json()
    assert isinstance(body, list)
    assert ids(body) == [b, c, a]  # newest first, whatever order they were asked in
    assert body == [whole[b], whole[c], whole[a]]
    assert ids(api.get(f"/api/runs/?id={a},{a}").json()) == [a]  # asked twice, given once


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("limit=-1", "limit", "between 1 and 1000"),
        ("limit=0", "limit", "between 1 and 1000"),
        ("limit=1001", "limit", "between 1 and 1000"),
        ("limit=ten", "limit", "between 1 and 1000"),
        ("limit=2.5", "limit", "between 1 and 1000"),
        ("limit=3&offset=-2", "offset", "at least 0"),
        ("limit=3&offset=x", "offset", "at least 0"),
        ("offset=3", "limit", "offset needs a limit"),
        ("id=abc", "id", "is not a run id"),
        ("id=-4", "id", "is not a run id"),
        ("id=1,,2", "id", "is not a run id"),
        ("id=99999999999999999999", "id", "is not a run id"),
        ("id=999999", "id", "no run with id 999999"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(api, seven, query, field, words):
    answer = api.get(f"/api/runs/?{query}")
    assert answer.status_code == 400, answer.content
    message = " ".join(answer.json()["errors"][field])
    assert words in message


def test_an_unknown_id_among_known_ones_is_named(api, seven):
    answer = api.get(f"/api/runs/?id={seven[0].pk},999998,999999")
    assert answer.status_code == 400
    assert answer.json()["errors"]["id"] == ["no run with id 999998, 999999"]


def test_picking_and_paging_at_once_is_refused(api, seven):
    answer = api.get(f"/api/runs/?id={seven[0].pk}&limit=2")
    assert answer.status_code == 400
    assert "cannot be combined with limit or offset" in answer.json()["errors"]["id"][0]


def test_too_many_ids_are_refused(api, seven):
    many = ",".join(str(i) for i in range(1, 1003))
    answer = api.get(f"/api/runs/?id={many}")
    assert answer.status_code == 400
    assert "at most 1000 runs" in answer.json()["errors"]["id"][0]


def test_the_reads_need_what_the_list_needs(anon, seven):
    """Private reads (MLBENCH_PUBLIC_READ off here): a page is no way around the login."""
    for query in ("", "?limit=2", f"?id={seven[0].pk}"):
        assert anon.get(f"/api/runs/{query}").status_code in (401, 403)
