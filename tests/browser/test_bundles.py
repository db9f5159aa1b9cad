"""The Bundles page and an imported run's page in Chromium: the installation named in the
footer, a bundle uploaded through the form (POST /api/bundles/ from the page's script), a
tampered one refused with the member named, and the imported run shown with its origin,
read-only (no Resume, no Delete for a user who is not staff)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import assert_accessible, screenshot

pytestmark = pytest.mark.browser


def _bundle(settings, tmp_path) -> tuple[bytes, str]:
    """A finished series exported by another installation (another MLBENCH_HOME, another
    key), and that installation's fingerprint."""
    from rest_framework.test import APIClient

    from mlbench_master.accounts.users import issue_user_token
    from mlbench_master.bundles import signing
    from tests.bundles import data

    settings.MLBENCH_HOME = tmp_path / "origin"
    staff = APIClient()
    staff.credentials(
        HTTP_AUTHORIZATION=f"Token {issue_user_token('root', create_user=True, superuser=True)}"
    )
    series = data.finished_series(staff)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    origin = signing.this_installation().fingerprint
    settings.MLBENCH_HOME = tmp_path / "here"
    return bundle, origin


def _upload(page, body: bytes, name: str) -> str:
    page.set_input_files(
        "#bundle-file", files=[{"name": name, "mimeType": "application/zip", "buffer": body}]
    )
    page.click("#import-button")
    page.wait_for_function(
        "['stored', 'Refused'].some((w) => document.querySelector('#import-status').textContent.includes(w))"
    )
    return page.locator("#import-status").inner_text()


def test_a_bundle_is_imported_from_the_page_and_shown_read_only(page, settings, tmp_path):
    from mlbench_master.api.models import Run
    from mlbench_master.bundles import signing
    from tests.bundles import data

    bundle, origin = _bundle(settings, tmp_path)
    page.goto("/bundles/")
    mine = signing.this_installation()
    assert page.locator("#installation").inner_text().count(mine.fingerprint) == 1
    assert page.locator("#own-key").inner_text() == mine.public_key
    page.locator("#bundle-empty").wait_for(state="visible")
    assert_accessible(page)

    # Tampered: refused, the member named, nothing listed.
    files = data.members(bundle)
    target = next(n for n in files if n.endswith("logs.jsonl"))
    files[target] = files[target].replace(b"line 1", b"line 9", 1)
    page.watch.allowed_status.add(400)
    status = _upload(page, data.rezip(files), "tampered.zip")
    assert status.startswith("Refused:") and target in status, status
    assert page.locator("#bundle-table tbody tr").count() == 0

    status = _upload(page, bundle, "series.zip")
    assert f"signed by installation {origin}; 2 runs stored" in status, status
    page.wait_for_selector("#bundle-table tbody tr")
    assert origin in page.locator("#bundle-table tbody tr").first.inner_text()
    screenshot(page, "bundles")

    imported = Run.objects.filter(origin__isnull=False).order_by("id").first()
    page.goto(f"/runs/{imported.pk}/")
    box = page.locator("#run-origin")
    box.wait_for(state="visible")
    text = box.inner_text()
    assert f"of installation {origin}" in text and "read-only" in text, text
    assert "the grades agree" in text
    assert page.locator("#resume-run").is_hidden() and page.locator("#delete-run").is_hidden()
    assert (
        page.locator("#export-bundle").get_attribute("href") == f"/api/runs/{imported.pk}/bundle/"
    )
