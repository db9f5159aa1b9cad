"""The Trusted keys page and the board in Chromium: an imported result of a key this
installation does not trust is shown as an unverified origin and not ranked; staff trust
its key on the page (a bad key first: refused, the field named), and it ranks; removed, it
is unranked again."""

from __future__ import annotations

import pytest

from tests.board.stored import TASK, prepared
from tests.browser.conftest import assert_accessible, screenshot

pytestmark = pytest.mark.browser


def _imported_row(page, pk: int):
    page.goto(f"/board/{TASK}/")
    page.wait_for_function("Number(document.body.dataset.loaded || 0) >= 1")
    return page.locator(f'tr[data-entry="run-{pk}"]')


def test_staff_trust_a_key_on_the_page_and_the_board_follows(
    page, dashboard_user, settings, tmp_path
):
    stored = prepared(settings, tmp_path, trust_origin=False)
    imported = stored.runs["imported"].pk
    dashboard_user.is_staff = True
    dashboard_user.save()
    row = _imported_row(page, imported)
    assert row.locator(".trust").inner_text() == "unverified origin"
    assert row.locator(".rank").inner_text().startswith("unranked: unverified origin")
    assert row.get_attribute("data-trust") == "unverified"
    assert (
        "graded on the whole test set (100,000 examples)" in row.locator(".graded-on").inner_text()
    )

    page.goto("/trust/")
    page.wait_for_selector("body[data-loaded='1']")
    own = page.locator('#trust-table tr[data-own="1"]')
    assert (
        "this installation (own key)" in own.inner_text()
        and "cannot be removed" in own.inner_text()
    )
    form = page.locator("#trust-form")
    form.get_by_label("Public key (base64)").fill("not a key")
    form.get_by_label("Name").fill("Lab A")
    page.watch.allowed_status = {400}
    form.get_by_role("button", name="Trust this key").click()
    page.wait_for_selector("#trust-errors li")
    assert page.locator("#trust-errors li").first.inner_text().startswith("key: not an Ed25519")
    form.get_by_label("Public key (base64)").fill(stored.origin_key)
    form.get_by_role("button", name="Trust this key").click()
    added = page.locator(f'#trust-table tr[data-fingerprint="{stored.origin_fingerprint}"]')
    added.wait_for()
    assert "Lab A" in added.inner_text() and added.locator(".runs").inner_text() == "1"
    assert_accessible(page)
    screenshot(page, "trust")

    row = _imported_row(page, imported)
    assert row.locator(".trust").inner_text() == "trusted (Lab A)"
    assert row.locator(".rank").inner_text() == "1"
    page.goto(f"/runs/{imported}/")
    page.locator("#run-origin").wait_for(state="visible")
    assert "trusted (Lab A)" in page.locator("#run-origin").inner_text()

    page.goto("/trust/")
    page.wait_for_selector("body[data-loaded='1']")
    page.on("dialog", lambda dialog: dialog.accept())
    added.get_by_role("button", name="Remove").click()
    added.wait_for(state="detached")
    assert "unverified again" in page.locator("#trust-status").inner_text()
    row = _imported_row(page, imported)
    assert row.locator(".rank").inner_text().startswith("unranked: unverified origin")
