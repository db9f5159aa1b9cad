"""Every dashboard page loads with its data, no console errors and no failed requests, at
1280×800 and on a narrow screen; screenshots of each go to test-output/screenshots/."""

import re

import pytest
from django.utils import timezone

from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.seed import make_pods, make_run, store_points

pytestmark = pytest.mark.browser


def loaded(page):
    page.wait_for_selector("body[data-loaded='1']")


def chart_points(page, chart_id: str) -> int:
    return int(page.locator(f"#{chart_id}").get_attribute("data-points") or 0)


def no_sideways_scroll(page):
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate(
        """w => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > w + 1)
        .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)""",
        page.viewport_size["width"],
    )
    assert width <= page.viewport_size["width"] + 1, f"{page.url} is {width}px wide: {wide}"


def test_every_page(page):
    make_pods(["mlbench-worker-0", "mlbench-worker-1"])
    one = make_run("baseline, 1 worker", 1)
    two = make_run("two workers", 2, dataset_used="synthetic")

    # Workers (main page): both workers, their state and sparklines with data.
    page.goto("/")
    loaded(page)
    rows = page.locator("#workers-table tbody tr")
    assert rows.count() == 2
    assert "Running" in rows.first.locator(".phase").inner_text()
    page.wait_for_function("document.querySelectorAll('#workers-table canvas').length >= 6")
    assert "MiB" in rows.first.locator("td").nth(4).inner_text()
    screenshot(page, "workers")
    assert_accessible(page)
    # A reading recorded after the page loaded shows up without a reload.
    store_points(
        [
            {
                "pod_name": "mlbench-worker-0",
                "name": "cpu_cores",
                "value": 1.5,
                "date": timezone.now().isoformat(),
            }
        ]
    )
    page.wait_for_function(
        "document.querySelector('tr[data-worker=\"mlbench-worker-0\"] .spark-value').textContent === '1.5'"
    )

    # Clicking a worker opens its details with resource charts.
    rows.first.click()
    page.wait_for_url(re.compile(r"/workers/mlbench-worker-0/$"))
    loaded(page)
    page.wait_for_function("Number(document.querySelector('#chart-cpu_cores').dataset.points) > 0")
    assert "Running" in page.locator("#worker-info").inner_text()
    page.select_option("#time-range", "900")
    page.wait_for_function(
        "Number(document.querySelector('#chart-memory_bytes')?.dataset.points) > 0"
    )
    screenshot(page, "worker-details")
    assert_accessible(page)

    # Runs: the list with state, workers, dataset (synthetic badge) and time to target.
    page.goto("/runs/")
    loaded(page)
    row = page.locator(f"tr[data-run-id='{two.pk}']")
    assert "finished" in row.locator(".state").inner_text()
    assert row.locator(".badge.synthetic").is_visible()
    assert page.locator(f"tr[data-run-id='{one.pk}'] .badge.synthetic").count() == 0
    assert "min" in row.locator("td").nth(5).inner_text()
    page.get_by_role("button", name="New run").click()
    screenshot(page, "runs")
    assert_accessible(page)

    # Run details: charts with data, time split, logs, configuration and manifest.
    page.goto(f"/runs/{two.pk}/")
    loaded(page)
    for chart in ("chart-loss", "chart-accuracy", "chart-lr", "chart-throughput", "chart-split"):
        page.wait_for_function(f"Number(document.querySelector('#{chart}').dataset.points) > 0")
    assert "rank 1 stderr" in page.locator("#run-logs").inner_text()
    assert "compute" in page.locator("#time-split").inner_text()
    assert "%" in page.locator("#time-split").inner_text()
    assert page.locator("#run-summary .badge.synthetic").is_visible()
    screenshot(page, "run-details")
    assert_accessible(page)
    # Downloads: every metric of the run as a zip, and as JSON.
    zipped = page.request.get(page.locator("#download-zip").get_attribute("href"))
    assert zipped.status == 200 and zipped.body()[:2] == b"PK"
    as_json = page.request.get(page.locator("#download-json").get_attribute("href")).json()
    assert len(as_json["val_accuracy"]) == 10
    page.get_by_label("epoch").check()
    page.wait_for_function("Number(document.querySelector('#chart-loss').dataset.points) > 0")
    assert "epoch" in page.locator("#chart-loss").inner_text()

    # Compare: both runs' curves and the table (speed-up rules: test_compare.py).
    page.goto(f"/compare/?runs={one.pk},{two.pk}")
    loaded(page)
    page.wait_for_function("Number(document.querySelector('#chart-compare').dataset.points) > 0")
    assert page.locator("#compare-table tbody tr").count() == 2
    row = page.locator(f"#compare-table tr[data-run-id='{two.pk}']")
    assert row.locator(".ttt").inner_text() == "1 min 57 s"  # 7 epochs to 70 %: 210 s / 1.8
    assert page.locator("#compare-warning").is_visible()  # synthetic beside CIFAR-10
    assert row.locator(".speedup").inner_text().startswith("—")

    # A narrow screen: no page-wide sideways scrolling, navigation still there.
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/", "/workers/mlbench-worker-0/", "/runs/", f"/runs/{two.pk}/", "/compare/"):
        page.goto(path)
        loaded(page)
        no_sideways_scroll(page)
        assert page.get_by_role("navigation").is_visible()
    page.goto(f"/runs/{two.pk}/")
    loaded(page)
    screenshot(page, "run-details-narrow", full_page=False)

    # A run that does not exist (deleted meanwhile): a message, not a broken page.
    page.watch.allowed_status = {404}
    page.goto("/runs/999999/")
    loaded(page)
    assert "no run 999999" in page.locator("#run-status").inner_text()
