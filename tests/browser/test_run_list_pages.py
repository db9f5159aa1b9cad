"""The runs page and compare's picker read the runs list a page at a time, and compare reads
the runs its address names by id: never the whole list (GET /api/runs/ without limit or
id), which at a large installation is tens of megabytes."""

import pytest

from tests.browser.seed import make_run

pytestmark = pytest.mark.browser


def _many(n: int) -> list:
    """`n` plain runs (no metrics), oldest first, made in one statement."""
    from mlbench_master.api.models import Run

    return Run.objects.bulk_create(
        [Run(name=f"plain {i}", state=Run.FAILED, reason="test") for i in range(n)]
    )


def _whole_list_asked(requested: list[str]) -> list[str]:
    return [u for u in requested if u.split("?")[0].endswith("/api/runs/") and "?" not in u]


def test_the_runs_page_turns_pages_of_fifty(page):
    _many(80)
    requested = []
    page.on("request", lambda r: "/api/runs/" in r.url and requested.append(r.url))
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    status = page.locator("#runs-status")
    assert "Runs 1–50 of 80, newest first." in status.inner_text()
    assert page.locator("#runs-table tbody tr").count() == 50
    assert page.locator("#runs-table tbody tr").first.inner_text().startswith("plain 79")
    assert page.get_by_role("button", name="Newer runs").is_disabled()
    page.get_by_role("button", name="Older runs").click()
    page.wait_for_function("document.querySelector('#runs-status').textContent.includes('51–80')")
    assert page.locator("#runs-table tbody tr").count() == 30
    assert page.get_by_role("button", name="Older runs").is_disabled()
    page.get_by_role("button", name="Newer runs").click()
    page.wait_for_function("document.querySelector('#runs-status').textContent.includes('1–50 ')")
    assert not _whole_list_asked(requested), requested


def test_compare_reads_its_picked_runs_by_id_and_pages_its_picker(page):
    old = make_run("an old run", 1, ago=7200)  # older than the 60 below: not on the first page
    _many(60)
    requested = []
    page.on("request", lambda r: "/api/runs/" in r.url and requested.append(r.url))
    page.goto(f"/compare/?runs={old.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-compare').dataset.points) > 0")
    assert page.locator(f"#compare-table tr[data-run-id='{old.pk}']").count() == 1
    picks = page.locator("#run-picker label.pick")
    assert picks.count() == 51  # the named run, then the 50 newest
    assert picks.first.locator("input").is_checked()
    page.get_by_role("button", name="Older runs").click()
    page.wait_for_function("document.querySelectorAll('#run-picker label.pick').length === 61")
    assert page.get_by_role("button", name="Older runs").is_hidden()
    assert any(f"id={old.pk}" in u for u in requested)
    assert not _whole_list_asked(requested), requested
