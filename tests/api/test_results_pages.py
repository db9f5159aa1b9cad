"""GET /api/results/?limit=&offset=: a page of the ranked board, in the envelope of GET
/api/runs/'s pages (count, offset, limit, next_offset) around the board's own keys, its
entries in their sections as the whole board places and ranks them; bad values are a 400
naming the field. Without them the board is answered whole, as it always was."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from tests.board.stored import TASK, prepared

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(settings, tmp_path) -> APIClient:
    prepared(settings, tmp_path)
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Token {issue_user_token('root', create_user=True, superuser=True)}"
    )
    return client


def _get(client: APIClient, **query) -> dict:
    answer = client.get("/api/results/", query)
    assert answer.status_code == 200, answer.content
    return answer.json()


def _placed(body: dict) -> list[tuple[str, str, int | None]]:
    """(section label, entry id, rank) of every entry, in the answer's order."""
    return [(s["label"], e["id"], e["rank"]) for s in body["sections"] for e in s["entries"]]


@pytest.mark.parametrize("query", [{}, {"task": TASK}, {"task": TASK, "data": "real"}])
def test_pages_put_together_are_the_whole_board(staff, query):
    whole = _get(staff, **query)
    assert set(whole) == {"installation", "filters", "count", "sections"}  # as it always was
    pages, offset = [], 0
    while offset is not None:
        page = _get(staff, **query, limit=2, offset=offset)
        assert page["count"] == whole["count"] and page["limit"] == 2
        assert page["offset"] == offset and len(_placed(page)) <= 2
        assert page["installation"] == whole["installation"]
        assert page["filters"] == whole["filters"]
        pages.append(page)
        offset = page["next_offset"]
    assert len(pages) == (whole["count"] + 1) // 2
    assert [p for page in pages for p in _placed(page)] == _placed(whole)
    entries = {e["id"]: e for s in whole["sections"] for e in s["entries"]}
    for page in pages:
        for section in page["sections"]:
            same = next(s for s in whole["sections"] if s["label"] == section["label"])
            assert {k: v for k, v in section.items() if k != "entries"} == {
                k: v for k, v in same.items() if k != "entries"
            }
            assert all(e == entries[e["id"]] for e in section["entries"])


def test_a_page_lists_each_filters_values_among_the_entries_matched(staff):
    page = _get(staff, task=TASK, limit=1)
    values = page["values"]
    assert values["data"] == ["real", "synthetic"]
    assert values["evaluation"] == ["evaluated", "self-reported"]
    assert values["workers"] == [1, 2, 4]
    assert "local" in values["origin"] and "imported" in values["origin"]
    assert sorted(values["backend"]) == values["backend"] and "gloo" in values["backend"]
    assert _get(staff, task=TASK, data="synthetic", limit=5)["values"]["data"] == ["synthetic"]


def test_past_the_last_entry_a_page_is_empty(staff):
    count = _get(staff, task=TASK)["count"]
    page = _get(staff, task=TASK, limit=5, offset=count)
    assert page["sections"] == [] and page["next_offset"] is None and page["count"] == count


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "5", "offset": "-1"}, "offset"),
        ({"limit": "5", "offset": "later"}, "offset"),
        ({"offset": "5"}, "limit"),
    ],
)
def test_a_bad_page_is_a_400_naming_the_field(staff, query, named):
    answer = staff.get("/api/results/", {"task": TASK, **query})
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith(f"{named}: "), answer.json()
