"""Series, the queue and the run page's axes in the dashboard: the series page shows the
statistics the API computed (no arithmetic of its own), the runs page each queued run's
place and its series, the form starts a series; a just-started run's charts have sane
axes; the staff queue page loads without a failed request."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.browser.conftest import assert_accessible
from tests.browser.seed import make_run, store_points

pytestmark = pytest.mark.browser


def _series_with_runs():
    """A series of 2 seeds x 2 worker counts: three runs ended, the last one queued."""
    from mlbench_master.api.models import Run, Series

    series = Series.objects.create(
        name="seeded series", seeds=[1, 2], worker_counts=[1, 2],
        settings={"task": "resnet20-cifar10", "target": "light"},
    )  # fmt: skip
    for workers, seed, epochs in ((1, 1, 10), (1, 2, 9), (2, 1, 10)):
        make_run(f"s{seed} w{workers}", workers, epochs=epochs, series=series, seed=seed)
    queued = Run.objects.create(
        name="s2 w2", num_workers=2, state=Run.QUEUED, series=series, seed=2, target="light"
    )
    return series, queued


def test_the_series_page_shows_what_the_api_computed(page):
    series, queued = _series_with_runs()
    api = page.request.get(f"/api/series/{series.pk}/").json()
    page.goto(f"/series/{series.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    rows = page.locator("#series-stats tbody tr")
    assert rows.count() == len(api["statistics"]["groups"]) == 2
    for group in api["statistics"]["groups"]:
        row = page.locator(f"#series-stats tr[data-workers='{group['num_workers']}']")
        assert row.locator(".reached").inner_text() == f"{group['reached']} / {group['runs']}"
        median = group["time_to_target"]["median"]
        if median is not None:  # shown as a duration of the API's own median
            assert "median" in row.inner_text()
    # Every run's curve and each worker count's band (low, median, high), as the API gives.
    curves = [c for c in api["statistics"]["curves"] if c["points"]]
    bands = [b for b in api["statistics"]["bands"] if b["points"]]
    drawn = page.evaluate("document.getElementById('chart-series').lineChart.plot.series.length")
    assert drawn == 1 + len(curves) + 3 * len(bands)
    # Each band shaded from its high line down to its low line (uPlot numbers series from 1).
    shaded = page.evaluate(
        "(() => { const u = document.getElementById('chart-series').lineChart.plot;"
        " return (u.bands || []).map((b) => b.series.map((i) => u.series[i].label)); })()"
    )
    assert shaded == [[f"{b['num_workers']} w high", f"{b['num_workers']} w low"] for b in bands]
    assert bands, "the test's series must have a band to draw"
    queued_row = page.locator(f"#series-runs tr[data-run-id='{queued.pk}']")
    assert queued_row.locator(".queue-position").inner_text() == "#1"
    links = page.locator("#series-downloads a")
    hrefs = {links.nth(i).get_attribute("href") for i in range(links.count())}
    assert f"/api/series/{series.pk}/plots/speedup.svg" in hrefs
    assert f"/api/series/{series.pk}/plots/accuracy.png" in hrefs

    # The runs page: the queued run's place and its series; the run page links back.
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator(f"#runs-table tr[data-run-id='{queued.pk}']")
    assert "#1 in the queue" in row.inner_text()
    row.locator(".series-link").click()
    page.wait_for_selector("#series-stats tbody tr")
    page.goto(f"/runs/{queued.pk}/")
    page.wait_for_selector("#series-link")
    assert page.locator("#series-link").get_attribute("href") == f"/series/{series.pk}/"
    assert page.locator("#cancel-run").is_visible()  # a queued run can leave the queue
    assert "Place in the queue" in page.locator("#run-config").inner_text()

    # Cancelling the series drops its queued run.
    page.goto(f"/series/{series.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("button", name="Cancel series").click()
    page.wait_for_function(
        "document.querySelector('#series-state').textContent.includes('cancelled')"
    )
    queued.refresh_from_db()
    assert queued.state == "CANCELLED"


def test_the_series_page_is_in_the_navigation_and_lists_every_series(page):
    """A new user found a series only from one of its runs: the navigation now has a Series
    page listing them all (as GET /api/series/ does), each linking to its own page."""
    from mlbench_master.api.models import Series

    series, _ = _series_with_runs()
    empty = Series.objects.create(
        name="nothing run yet", seeds=[3], worker_counts=[1], settings={"task": "logreg-epsilon"}
    )
    page.goto("/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Series").click()
    page.wait_for_selector("#series-table tbody tr")
    assert page.url.endswith("/series/")
    current = page.locator("nav[aria-label='Main'] a[aria-current='page']")
    assert current.inner_text() == "Series"
    listed = [s["id"] for s in page.request.get("/api/series/").json()]
    rows = page.locator("#series-table tbody tr")
    assert [int(rows.nth(i).get_attribute("data-series-id")) for i in range(rows.count())] == listed
    assert listed == [empty.pk, series.pk]  # newest first
    row = page.locator(f"#series-table tr[data-series-id='{series.pk}']")
    assert row.locator(".runs").inner_text() == "3 / 4"  # three ended, one queued
    assert row.locator(".seeds").inner_text() == "1, 2"
    assert "logreg-epsilon" in page.locator(f"tr[data-series-id='{empty.pk}']").inner_text()
    assert_accessible(page)
    row.locator(".series-link").click()
    page.wait_for_selector("#series-stats tbody tr")
    assert page.url.endswith(f"/series/{series.pk}/")
    assert current.inner_text() == "Series"  # the series' own page is under it
    page.locator(".crumbs a").click()
    page.wait_for_selector("#series-table tbody tr")


def test_the_form_starts_a_series(page):
    from mlbench_master.api.models import Run, Series

    page.goto("/runs/#new")
    page.get_by_label("Run name").fill("form series")
    page.get_by_label("CPUs per worker").fill("1")
    page.get_by_label("Seeds").fill("1,2")
    page.get_by_label("Worker counts").fill("1, 2")
    page.get_by_role("button", name="Start run").click()
    # The notice with its link stays once the list has been refreshed under it.
    page.wait_for_function(
        "(() => { const s = document.querySelector('#runs-status');"
        " return s.querySelector('a') && s.textContent.includes('4 runs.'); })()"
    )
    series = Series.objects.get(name="form series")
    assert (series.seeds, series.worker_counts) == ([1, 2], [1, 2])
    assert Run.objects.filter(series=series).count() == 4
    # A duplicate seed is the API's 400, said on the Seeds field; nothing stored.
    page.watch.allowed_status.add(400)
    page.get_by_role("button", name="New run").click()
    page.get_by_label("Run name").fill("refused")
    page.get_by_label("Seeds").fill("3,3")
    page.get_by_role("button", name="Start run").click()
    page.locator("#e-seeds").wait_for()
    assert "given twice" in page.locator("#e-seeds").inner_text()
    assert not Series.objects.filter(name="refused").exists()


def test_a_just_started_run_has_sane_axes(page):
    """One training interval in (accuracy 0 so far): accuracy on a 0-100 % axis, not
    uPlot's 0-100 for a flat series (0-10,000 %), and a clock of whole seconds."""
    from mlbench_master.api.models import Run

    start = timezone.now() - dt.timedelta(seconds=30)
    run = Run.objects.create(name="just started", num_workers=1, state=Run.STARTED,
                             started_at=start, target="light")  # fmt: skip
    date = (start + dt.timedelta(seconds=20.4)).isoformat()
    store_points(
        [
            {"run_id": run.pk, "name": name, "value": value, "date": date,
             "metadata": {"elapsed": 0.4, "epoch": 0.01}}
            for name, value in (("train_accuracy", 0.0), ("elapsed", 0.4), ("epoch", 0.01),
                                ("train_loss", 2.2))
        ]
    )  # fmt: skip
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_function("Number(document.querySelector('#chart-accuracy')?.dataset.points) > 0")
    scales = page.evaluate(
        "() => { const u = document.getElementById('chart-accuracy').lineChart.plot;"
        " return {x: [u.scales.x.min, u.scales.x.max], y: [u.scales.y.min, u.scales.y.max],"
        " ticks: u.axes[0]._values}; }"
    )
    assert 0 <= scales["y"][0] < scales["y"][1] <= 1, scales  # a fraction: at most 100 %
    assert scales["x"][0] == 0 and scales["x"][1] >= 10, scales
    ticks = [t for t in scales["ticks"] if t]
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks  # no "0 s, 0 s, 0 s"


def test_the_staff_queue_pages_load_without_a_failed_request(page, dashboard_user):
    dashboard_user.is_staff = True
    dashboard_user.save()
    page.goto("/admin/rq/")
    page.wait_for_load_state("networkidle")
    assert "runs" in page.content()
    # The page's own watch (conftest) fails the test on any failed request or 404: here the
    # browser's own request for /favicon.ico, which the admin's pages do not name.
