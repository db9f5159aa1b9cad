"""Fixtures for the dashboard tests: Debian's Chromium driven by Playwright against
pytest-django's live server on the session's PostgreSQL.

Every page a test opens is watched: a console error, an uncaught exception, a failed request
or an HTTP error response fails the test (unless the test says it expects that status).
Screenshots go to test-output/screenshots/ (and to docs/images/ with MLBENCH_DOC_SCREENSHOTS=1).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("MLBENCH_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-output" / "screenshots"
DOC_IMAGES = ROOT / "docs" / "images"
PASSWORD = "dashboard-test-pw"


@pytest.fixture(scope="package", autouse=True)
def _orm_beside_playwright():
    """Playwright's sync API runs an event loop in this thread, while the ORM calls the tests
    make to seed data are plain synchronous calls. Allowed for this package only, so the
    variable never reaches other tests (or the subprocesses they start)."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package", autouse=True)
def _master_imported():
    """The master's URL modules, and the views, serializers and forms they import, loaded
    before the first test. The live server is a thread of this process: its first request
    would otherwise import them all, which took 16 s on a 2-core machine loaded 8 to 10,
    inside the first test's 15 s page timeout, so whichever test came first failed."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - evaluating the patterns imports the modules


def _missing(why: str) -> None:
    """Skip on a developer's machine; in CI a missing browser must fail, not pass silently."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="package")
def browser(django_db_setup):
    """Chromium through Playwright, for this package only. The test database is set up
    first: once Playwright's loop runs in this thread, Django refuses synchronous database
    calls until _orm_beside_playwright allows them. Stopped with the package, so no loop
    is left running in this thread for the ORM tests of the packages after it."""
    if not Path(CHROMIUM).exists():
        _missing(f"Chromium not found at {CHROMIUM}: run `make test-deps`")
    with launched_chromium() as b:
        yield b


@contextlib.contextmanager
def launched_chromium():
    """Headless Chromium through Playwright's sync API, closed with its block (the browser
    tests' and the Slurm Workers page's fixtures)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


class Watch:
    """Problems seen on a page: console errors, page errors, failed or error responses."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.allowed_status: set[int] = set()

    def attach(self, page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on(
            "requestfailed",
            lambda r: self._failed(r),
        )
        page.on("response", self._response)

    def _console(self, message) -> None:
        if message.type != "error":
            return
        # The browser logs every HTTP error response; the expected ones are not problems.
        status = re.search(r"Failed to load resource: .* status of (\d+)", message.text)
        if status and int(status.group(1)) in self.allowed_status:
            return
        self.problems.append(f"console: {message.text}")

    def _failed(self, request) -> None:
        # A navigation away aborts the old page's polling requests: not a failure.
        if request.failure and "ERR_ABORTED" in request.failure:
            return
        self.problems.append(f"request failed: {request.method} {request.url} {request.failure}")

    def _response(self, response) -> None:
        if response.status >= 400 and response.status not in self.allowed_status:
            self.problems.append(
                f"HTTP {response.status}: {response.request.method} {response.url}"
            )


@pytest.fixture
def dashboard_user(transactional_db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("alice", password=PASSWORD)


def _context(browser, live_server, width=1280, height=800):
    return browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )


@pytest.fixture
def anon_page(browser, live_server, transactional_db):
    """A page with no session, watched for errors."""
    ctx = _context(browser, live_server)
    page = ctx.new_page()
    page.set_default_timeout(15000)
    watch = Watch()
    watch.attach(page)
    page.watch = watch
    yield page
    ctx.close()
    assert not watch.problems, "\n".join(watch.problems)


@pytest.fixture
def page(browser, live_server, dashboard_user, settings, redis_settings):
    """A signed-in page (session cookie made by Django's test client), watched for errors."""
    from django.test import Client

    # Workers are the ones a test seeds, not those the local driver would report.
    settings.MLBENCH_PODS_REFRESH_SECONDS = 0
    client = Client()
    client.force_login(dashboard_user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    ctx = _context(browser, live_server)
    ctx.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
    pg = ctx.new_page()
    pg.set_default_timeout(15000)
    watch = Watch()
    watch.attach(pg)
    pg.watch = watch
    yield pg
    ctx.close()
    assert not watch.problems, "\n".join(watch.problems)


def screenshot(page, name: str, full_page: bool = True) -> Path:
    """Save a screenshot for the test output and the docs (docs/images/)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if os.environ.get("MLBENCH_DOC_SCREENSHOTS") == "1" and DOC_IMAGES.parent.is_dir():
        DOC_IMAGES.mkdir(exist_ok=True)
        shutil.copyfile(path, DOC_IMAGES / f"dashboard-{name}.png")
    return path


AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


def assert_accessible(page) -> None:
    """axe-core's WCAG 2 A/AA rules (contrast, labels, names, structure) find nothing.

    axe-core is a devDependency from package-lock.json; the check is skipped when `npm ci`
    has not been run (and fails the test in CI)."""
    if not AXE.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{AXE} missing: run `make install` (npm ci)")
        return
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        "() => axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}})"
    )
    problems = [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + ", ".join(n["target"][0] for n in v["nodes"][:3])
        for v in result["violations"]
    ]
    assert not problems, f"{page.url}:\n" + "\n".join(problems)
