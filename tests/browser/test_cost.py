"""Cost in the dashboard: the series page plots cost to target and the price index against
workers as the API computed them, the run and compare pages show a run's cost or "not
priced" with the reason, and staff edit the price table on its page (400s shown by field).
Runs are stored rows (tests/browser/seed.py) with the prices and nodes a run records."""

from __future__ import annotations

import datetime as dt

import pytest

from mlbench_master.cluster import node_kinds
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.seed import make_run

pytestmark = pytest.mark.browser

EMPTY = "not priced: the price table was empty when the run was created"


def _priced(run, nodes) -> None:
    """What the master records for a run: its copy of the table, its launch's nodes."""
    from mlbench_master.api.models import Run
    from mlbench_master.results import prices

    Run.objects.filter(pk=run.pk).update(
        prices=prices.snapshot(), job_metadata={node_kinds.RECORD_KEY: nodes}
    )


def _series():
    """Two seeds x 1, 2 and 4 workers on n1-standard-4 nodes at 0.2 USD an hour (one node a
    worker), and one more run made before any price: not priced."""
    from mlbench_master.api.models import NodePrice, Series

    NodePrice.objects.create(node_kind="n1-standard-4", price_per_hour="0.2", currency="USD",
                             source="list", as_of=dt.date(2026, 11, 1))  # fmt: skip
    series = Series.objects.create(
        name="priced series", seeds=[1, 2], worker_counts=[1, 2, 4],
        settings={"task": "resnet20-cifar10", "target": "light"},
    )  # fmt: skip
    selector = {"node.kubernetes.io/instance-type": "n1-standard-4"}
    for workers in (1, 2, 4):
        for seed in (1, 2):
            speed = {1: 1.0, 2: 1.7, 4: 2.9}[workers] * (1 + 0.05 * seed)
            run = make_run(f"s{seed} w{workers}", workers, epochs=8, series=series, seed=seed,
                           speed=speed)  # fmt: skip
            pods = [f"node-{seed}-{workers}-{i}" for i in range(workers)]
            _priced(run, node_kinds.kubernetes_nodes(pods, selector))
    return series


def test_the_series_page_plots_cost_and_price_index_against_workers(page):
    series = _series()
    stats = page.request.get(f"/api/series/{series.pk}/").json()["statistics"]
    assert stats["cost"]["currency"] == "USD" and stats["cost"]["priced"] == 6
    page.goto(f"/series/{series.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    plotted = page.evaluate(
        "(() => { const u = document.getElementById('chart-cost').lineChart.plot;"
        " return {labels: u.series.map((s) => s.label), data: u.data}; })()"
    )
    groups = stats["groups"]
    assert plotted["labels"] == ["workers", "median", "cheapest run", "dearest run"]
    assert plotted["data"][0] == [g["num_workers"] for g in groups] == [1, 2, 4]
    assert plotted["data"][1] == pytest.approx([g["cost_to_target"]["median"] for g in groups])
    assert plotted["data"][3] == pytest.approx([g["cost_to_target"]["max"] for g in groups])
    index = page.evaluate("document.getElementById('chart-price-index').lineChart.plot.data")
    assert index[1] == pytest.approx([g["price_index"] for g in groups])
    assert index[1][0] == 1.0 and all(v > 1 for v in index[1][1:])  # dearer than it is faster
    four = page.locator("#series-stats tr[data-workers='4']")
    assert four.locator(".price-index").inner_text() == f"{groups[2]['price_index']:.3g}"
    assert four.locator(".price-per-hour").inner_text() == "0.8 USD/h"  # four nodes at 0.2
    curve = stats["curves"][0]
    cell = page.locator(f"#series-runs tr[data-run-id='{curve['run']}'] .cost").inner_text()
    assert cell == f"{curve['cost_to_target']:.3g} / {curve['run_cost']:.3g} USD"
    assert "USD, at the prices each run copied" in page.locator("#series-cost-note").inner_text()
    page.locator("#series-cost").scroll_into_view_if_needed()
    screenshot(page, "series-cost", full_page=False)


def test_run_and_compare_pages_show_the_cost_or_why_there_is_none(page):
    from mlbench_master.api.models import NodePrice, Series

    alone = Series.objects.create(name="unpriced", seeds=[1], worker_counts=[1],
                                  settings={"task": "resnet20-cifar10", "target": "light"})  # fmt: skip
    unpriced = make_run("before prices", 1, epochs=8, series=alone, seed=1)
    _priced(unpriced, node_kinds.local_nodes(1))  # the table was empty: not priced
    NodePrice.objects.create(node_kind="local", price_per_hour="3", currency="EUR",
                             source="own", as_of=dt.date(2026, 11, 1))  # fmt: skip
    priced = make_run("after prices", 2, epochs=8)
    _priced(priced, node_kinds.local_nodes(2))
    cost = page.request.get(f"/api/runs/{priced.pk}/").json()["cost"]
    page.goto(f"/runs/{priced.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    card = page.locator("#run-cost").inner_text()
    assert f"{cost['to_target']['cost']:.3g} EUR" in card and "3.00 EUR/h" in card
    assert "local, on-demand, 3.00 EUR/h, from own as of 2026-11-01" in card
    page.goto(f"/runs/{unpriced.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#run-cost").inner_text().split("\n")[-1] == EMPTY
    page.goto(f"/compare/?runs={priced.pk},{unpriced.pk}")
    page.wait_for_selector("#compare-table tbody tr .cost")
    cells = page.locator("#compare-table tbody tr .cost")
    texts = sorted(cells.nth(i).inner_text() for i in range(cells.count()))
    whole = cost["whole_run"]["cost"]
    assert texts[0] == f"{cost['to_target']['cost']:.3g} / {whole:.3g} EUR"
    assert texts[1].startswith("not priced") and "the price table was empty" in texts[1], texts
    page.goto(f"/series/{alone.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#series-cost-note").inner_text() == f"{EMPTY}."
    assert page.locator(f"#series-runs tr[data-run-id='{unpriced.pk}'] .cost").inner_text() == (
        "not priced"
    )
    assert page.locator("#chart-cost").get_attribute("data-points") == "0"


def test_staff_edit_the_price_table_and_see_its_refusals(page, dashboard_user):
    from mlbench_master.api.models import NodePrice

    dashboard_user.is_staff = True
    dashboard_user.save()
    page.goto("/prices/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#prices-empty").is_visible()
    form = page.locator("#price-form")
    form.get_by_label("Kind of node").fill("local")
    form.get_by_label("Price per hour").fill("-1")
    form.get_by_label("Currency").fill("usd")
    form.get_by_label("Source").fill("our own list")
    form.get_by_label("As of").fill("2026-11-01")
    page.watch.allowed_status = {400}
    form.get_by_role("button", name="Save").click()
    page.wait_for_selector("#price-errors li")
    assert (
        "price_per_hour: a price per hour is 0 or more"
        in page.locator("#price-errors").inner_text()
    )
    form.get_by_label("Price per hour").fill("0.35")
    form.get_by_role("button", name="Save").click()
    page.wait_for_selector("#prices-table tr[data-kind='local']")
    assert "0.35 USD/h" in page.locator("#prices-table tr[data-kind='local']").inner_text()
    assert NodePrice.objects.get().currency == "USD"
    screenshot(page, "prices")
    assert_accessible(page)
