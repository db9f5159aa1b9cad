"""Starting a run from the form, the limits and conflicts it reports, and following a run
live: charts and logs that pick up what arrives after the page loaded."""

import datetime as dt
import re

import pytest
import requests

from tests.browser.conftest import screenshot
from tests.browser.seed import training_points

pytestmark = pytest.mark.browser


def points_of(page, chart_id: str) -> int:
    return int(page.locator(f"#{chart_id}").get_attribute("data-points") or 0)


def open_form(page):
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("button", name="New run").click()


def test_form_creates_run_then_details_follow_it_live(page, live_server):
    from mlbench_master.api.models import Run
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.logs import append_logs

    requested = []
    page.on("request", lambda r: "/api/" in r.url and requested.append(r.url))

    open_form(page)
    page.get_by_label("Run name").fill("from the form")
    page.get_by_label("Workers").fill("2")
    page.get_by_label("CPUs per worker").fill("1")
    page.get_by_label("Dataset").select_option("synthetic")
    page.get_by_label("Time budget (s)").fill("60")
    page.get_by_role("button", name="Start run").click()
    link = page.get_by_role("link", name="from the form").first
    link.wait_for()
    run = Run.objects.get(name="from the form")
    assert (run.num_workers, run.num_cpus, run.dataset, run.time_budget) == (
        2,
        1.0,
        "synthetic",
        60,
    )
    assert run.state == "INITIALIZED" and run.job_id  # enqueued on the test Redis
    row = page.locator(f"#runs-table tr[data-run-id='{run.pk}']")
    row.wait_for()
    assert "initialized" in row.locator(".state").inner_text()

    # The run starts; its workers post metrics and mpirun's output is stored.
    lifecycle.mark_started(run)
    start = run.started_at
    token = lifecycle.worker_token(run)
    post = lambda pts: requests.post(  # noqa: E731
        f"{live_server.url}/api/metrics/",
        json=pts,
        headers={"Authorization": f"Token {token}"},
        timeout=10,
    )
    assert post(training_points(run.pk, start, range(3))).status_code == 201
    append_logs(run, [(0, "stdout", "epoch 1 of rank 0\n"), (1, "stderr", "a warning\n")])

    page.get_by_role("link", name="from the form").first.click()
    page.wait_for_url(re.compile(rf"/runs/{run.pk}/$"))
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-accuracy').dataset.points) > 0")
    before = points_of(page, "chart-accuracy")
    assert before == 6  # val and train accuracy, 3 epochs
    assert "a warning" in page.locator("#run-logs").inner_text()
    assert page.locator("#cancel-run").is_visible()

    # Points and output that arrive after the page loaded appear without a reload.
    assert post(training_points(run.pk, start, range(3, 6))).status_code == 201
    append_logs(run, [(0, "stdout", "epoch 5 of rank 0\n")])
    page.wait_for_function(
        f"Number(document.querySelector('#chart-accuracy').dataset.points) > {before}"
    )
    page.wait_for_function(
        "document.querySelector('#run-logs').textContent.includes('epoch 5 of rank 0')"
    )
    assert page.locator("#run-logs").inner_text().count("a warning") == 1
    screenshot(page, "run-details-live")

    # What was asked: metrics downsampled first, then only newer points; logs by offset.
    metric_urls = [u for u in requested if f"/api/metrics/{run.pk}/" in u]
    assert "summarize=" in metric_urls[0] and "since=" not in metric_urls[0]
    assert all("since=" in u and "summarize=" not in u for u in metric_urls[1:])
    log_offsets = [int(re.search(r"offset=(\d+)", u).group(1)) for u in requested if "/logs/" in u]
    assert log_offsets[0] == 0 and log_offsets[-1] >= 2 and log_offsets == sorted(log_offsets)

    # Cancel, after confirming.
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Keep it").click()
    run.refresh_from_db()
    assert run.state == "STARTED"
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Yes").click()
    page.wait_for_function("document.querySelector('#run-state').textContent.includes('cancelled')")
    run.refresh_from_db()
    assert run.state == "CANCELLED"

    # Delete, after confirming: back to the list, the run is gone.
    page.get_by_role("button", name="Delete run").click()
    page.get_by_role("button", name="Yes").click()
    page.wait_for_url(re.compile(r"/runs/$"))
    assert not Run.objects.filter(pk=run.pk).exists()


def test_form_limits_and_conflicts(page, settings):
    from mlbench_master.api.models import Run

    settings.MLBENCH_MAX_WORKERS = 3
    open_form(page)
    workers = page.get_by_label("Workers")
    assert workers.get_attribute("max") == "3"
    page.get_by_label("Run name").fill("too big")
    workers.fill("4")
    page.get_by_role("button", name="Start run").click()
    error = page.locator("#e-num_workers")
    error.wait_for()
    assert "3" in error.inner_text()
    assert workers.get_attribute("aria-invalid") == "true"
    assert not Run.objects.exists()

    # Past the browser's check, the server's 400 lands on the field too.
    page.watch.allowed_status = {400, 409}
    workers.evaluate("e => e.removeAttribute('max')")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_function(
        "document.querySelector('#e-num_workers').textContent.includes('MLBENCH_MAX_WORKERS')"
    )
    screenshot(page, "new-run-errors", full_page=False)
    assert not Run.objects.exists()

    # Another run is active: a clear message, no run created.
    Run.objects.create(name="busy", state="STARTED", started_at=dt.datetime.now(dt.UTC))
    workers.fill("2")
    page.get_by_role("button", name="Start run").click()
    page.locator("#form-error").wait_for()
    assert "Another run is still active" in page.locator("#form-error").inner_text()
    assert Run.objects.count() == 1
