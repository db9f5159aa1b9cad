"""The board page of a task with more entries than one read holds reads them a page at a
time (GET /api/results/?limit=100): it says how many there are and how many it shows, and
"Show more" reads the next page into the same sections, in the whole board's order."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from mlbench_master.api.models import Run
from tests.browser.test_board import _drawn, _entries

pytestmark = pytest.mark.browser
TASK = "logreg-epsilon"


def test_a_long_board_is_read_a_page_at_a_time(page):
    ended = timezone.now() - dt.timedelta(hours=1)
    Run.objects.bulk_create(
        Run(name=f"run {i}", task=TASK, seed=i, num_workers=1 + i % 2, state=Run.FINISHED,
            started_at=ended - dt.timedelta(minutes=5), finished_at=ended)
        for i in range(105)
    )  # fmt: skip
    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/results/" in r.url else None)
    page.goto(f"/board/{TASK}/")
    _drawn(page, 1)
    assert len(_entries(page)) == 100
    assert page.locator("#board-status").inner_text() == "105 entries; the first 100 shown."
    page.click("#board-more")
    _drawn(page, 2)
    drawn = _entries(page)
    assert len(drawn) == len(set(drawn)) == 105
    assert page.locator("#board-status").inner_text() == "105 entries."
    assert page.locator("#board-more").is_hidden()
    assert all("limit=100" in url for url in requests) and len(requests) == 2
    assert "offset=100" in requests[1]
    # The filters offer the task's values, though the first read held 100 entries only.
    workers = page.locator('select[name="workers"] option').all_inner_texts()
    assert workers == ["any", "1", "2"]
