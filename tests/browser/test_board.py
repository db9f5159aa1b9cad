"""The results board in Chromium on stored runs (one imported): its sections keep synthetic
data apart from real and evaluated results apart from self-reported ones, the filters ask
the API again and the rows follow, and a visitor without a session reads it only where the
operator allows anonymous reads."""

from __future__ import annotations

import pytest

from tests.board.stored import TASK, prepared
from tests.browser.conftest import assert_accessible, screenshot

pytestmark = pytest.mark.browser


def _drawn(page, times: int) -> None:
    page.wait_for_function(f"Number(document.body.dataset.loaded || 0) >= {times}")


def _entries(page, where: str = "") -> list[str]:
    return page.locator(f"{where} tr[data-entry]").evaluate_all(
        "rows => rows.map((r) => r.dataset.entry)"
    )


def test_the_board_separates_and_filters(page, settings, tmp_path):
    stored = prepared(settings, tmp_path)
    runs = {role: run.pk for role, run in stored.runs.items()}
    page.goto(f"/board/{TASK}/")
    _drawn(page, 1)
    assert page.locator("#board-synthetic").is_visible()
    assert _entries(page, "#board-synthetic") == [f"run-{runs['synthetic']}"]
    assert page.locator('#board-real tr[data-data="synthetic"]').count() == 0
    evaluated = '#board-real .board-section[data-evaluation="evaluated"]'
    self_reported = '#board-real .board-section[data-evaluation="self-reported"]'
    assert _entries(page, evaluated) == [f"run-{runs['graded']}"]
    assert _entries(page, self_reported) == [
        f"run-{runs[r]}" for r in ("imported", "two", "one", "missed")
    ]
    first = page.locator(f"{self_reported} tr[data-entry]").first
    assert first.locator(".rank").inner_text() == "1"
    assert first.locator(".origin").inner_text() == f"imported from {stored.origin_fingerprint}"
    assert "self-reported, not evaluated" in page.locator(self_reported).locator("h3").inner_text()
    assert_accessible(page)
    screenshot(page, "board")

    page.select_option('select[name="workers"]', "2")
    _drawn(page, 2)
    assert sorted(_entries(page)) == sorted(
        f"run-{runs[r]}" for r in ("imported", "two", "synthetic", "graded")
    )
    page.select_option('select[name="data"]', "real")
    _drawn(page, 3)
    assert page.locator("#board-synthetic").is_hidden()
    page.select_option('select[name="origin"]', "imported")
    _drawn(page, 4)
    assert _entries(page) == [f"run-{runs['imported']}"]
    page.select_option('select[name="origin"]', "local")
    page.select_option('select[name="workers"]', "")
    _drawn(page, 6)
    assert sorted(_entries(page)) == sorted(
        f"run-{runs[r]}" for r in ("two", "one", "missed", "graded")
    )


def test_the_board_reads_anonymously_only_where_allowed(anon_page, settings, tmp_path):
    prepared(settings, tmp_path)
    settings.MLBENCH_PUBLIC_READ = False
    anon_page.goto(f"/board/{TASK}/")
    assert "/login/" in anon_page.url
    settings.MLBENCH_PUBLIC_READ = True
    anon_page.goto(f"/board/{TASK}/")
    _drawn(anon_page, 1)
    assert len(_entries(anon_page)) == 6
    assert anon_page.locator("#board-synthetic").is_visible()


def test_the_static_board_opens_from_files_and_filters(
    browser, live_server, transactional_db, settings, tmp_path
):
    """The folder `mlbench board --html` writes, opened from disk (no server at all): the
    rows are in the page, synthetic ones under their own heading, and the select boxes
    hide the rows that do not match."""
    from mlbench_master.accounts.users import issue_user_token
    from mlbench_worker.client.cli import main

    stored = prepared(settings, tmp_path)
    token = issue_user_token("reader", create_user=True)
    site = tmp_path / "site"
    assert main(["--url", live_server.url, "--token", token, "board", "--html", str(site)]) == 0
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((site / "index.html").as_uri())
        page.click(f"text={TASK}")
        assert page.url.endswith(f"/{TASK}.html")
        assert len(_entries(page)) == 6
        assert _entries(page, ".synthetic") == [f"run-{stored.runs['synthetic'].pk}"]
        page.select_option('select[data-filter="workers"]', "1")
        shown = page.locator("tr[data-entry]:visible").evaluate_all(
            "rows => rows.map((r) => r.dataset.entry)"
        )
        assert shown == [f"run-{stored.runs['one'].pk}"]
        assert page.locator(".synthetic section:visible").count() == 0
        assert not errors, errors
    finally:
        ctx.close()
