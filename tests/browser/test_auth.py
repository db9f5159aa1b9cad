"""Signing in and out of the dashboard, and the launcher's one-time sign-in link."""

import re

import pytest

from tests.browser.conftest import PASSWORD, assert_accessible, screenshot

pytestmark = pytest.mark.browser


def test_sign_in_and_out(anon_page, live_server, dashboard_user):
    page = anon_page
    page.goto("/runs/")
    # Anonymous visitors are sent to sign in, and come back where they were going.
    page.wait_for_url(re.compile(r"/login/\?next=/runs/"))
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").is_visible()
    page.get_by_label("Password").fill(PASSWORD)
    screenshot(page, "sign-in")
    assert_accessible(page)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/runs/$"))
    assert page.locator(".who").inner_text() == "alice"
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/login/$"))
    page.goto("/")
    page.wait_for_url(re.compile(r"/login/\?next=/$"))


def test_one_time_link_signs_in_once(anon_page, live_server):
    from mlbench_master.dashboard.links import one_time_login_url

    url = one_time_login_url("local", live_server.url)
    assert url.startswith(live_server.url + "/login/once/")
    page = anon_page
    page.goto(url)
    page.wait_for_url(live_server.url + "/")
    assert page.locator(".who").inner_text() == "local"
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/login/$"))
    # The same link a second time: refused, with a message.
    page.goto(url)
    page.wait_for_url(re.compile(r"/login/$"))
    assert "already used" in page.locator(".messages").inner_text()


def test_public_read_shows_pages_without_write_controls(anon_page, settings):
    from tests.browser.seed import make_run

    settings.MLBENCH_PUBLIC_READ = True
    run = make_run("public", 1)
    page = anon_page
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator(f"tr[data-run-id='{run.pk}']").is_visible()
    assert page.get_by_role("button", name="New run").count() == 0
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.get_by_role("button", name="Delete run").count() == 0
    assert page.get_by_role("link", name="Sign in").is_visible()
