"""Chart axes on the benchmark clock: x-values come from the `elapsed` and `epoch` progress
series (start-up before the first training step excluded), fill before the first epoch
ends, follow live updates, and fall back to the run's start for runs without them."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.browser.seed import store_points, training_points

pytestmark = pytest.mark.browser
STARTUP = 20.0  # seconds between run.started_at and the first training step


def chart_x(page, chart_id: str) -> list[float]:
    """The x-values uPlot is drawing in a chart (its data[0])."""
    return page.evaluate(
        "id => Array.from(document.getElementById(id).lineChart.plot?.data[0] ?? [])", chart_id
    )


def wait_points(page, chart_id: str, n: int) -> None:
    page.wait_for_function(f"Number(document.querySelector('#{chart_id}')?.dataset.points) === {n}")


def new_run(name: str, start: dt.datetime, state: str = "STARTED"):
    from mlbench_master.api.models import Run

    return Run.objects.create(
        name=name, num_workers=1, num_cpus=1.0, target="light", state=state,
        created_at=start - dt.timedelta(seconds=5), started_at=start, max_epochs=2,
        finished_at=start + dt.timedelta(seconds=STARTUP + 60) if state == "FINISHED" else None,
    )  # fmt: skip


def test_axes_are_benchmark_clock_and_fractional_epochs(page):
    start = timezone.now() - dt.timedelta(hours=1)
    run = new_run("clocked", start)
    # Four log intervals per epoch of 30 s: epoch 0.25, 0.5, ... at 7.5 s, 15 s, ...
    points = training_points(run.pk, start, range(2), startup=STARTUP, intervals=4)
    store_points([p for p in points if p["metadata"]["epoch"] <= 0.5])

    # Mid-first-epoch, before any `epoch`-end point: both axes already have data.
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    wait_points(page, "chart-loss", 2)
    assert chart_x(page, "chart-loss") == pytest.approx([7.5, 15.0], abs=0.01)
    assert chart_x(page, "chart-split") == pytest.approx([7.5, 15.0], abs=0.01)
    page.get_by_label("epoch").check()
    wait_points(page, "chart-loss", 2)
    assert chart_x(page, "chart-loss") == pytest.approx([0.25, 0.5], abs=1e-4)

    # Points arriving later (fetched with since=) are placed the same way.
    store_points([p for p in points if p["metadata"]["epoch"] > 0.5])
    wait_points(page, "chart-loss", 10)  # 8 train_loss + 2 val_loss
    assert chart_x(page, "chart-loss") == pytest.approx([k / 4 for k in range(1, 9)], abs=1e-4)
    page.get_by_label("time").check()
    wait_points(page, "chart-loss", 10)
    assert chart_x(page, "chart-loss") == pytest.approx([7.5 * k for k in range(1, 9)], abs=0.01)

    # Compare: accuracy against the benchmark clock; a run whose points carry no clock (no
    # `elapsed` in their metadata, no progress series) falls back to its start (start-up
    # included).
    old = new_run("no progress series", start, state="FINISHED")
    store_points(
        [
            {**p, "metadata": {k: v for k, v in p["metadata"].items() if k != "elapsed"}}
            for p in training_points(old.pk, start, range(2), startup=STARTUP)
            if p["name"] != "elapsed"
        ]
    )
    page.goto(f"/compare/?runs={run.pk},{old.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    wait_points(page, "chart-compare", 4)
    assert chart_x(page, "chart-compare") == pytest.approx([30, 50, 60, 80], abs=0.01)
    page.get_by_label("Accuracy after (s)").fill("30")
    row = page.locator(f"#compare-table tr[data-run-id='{run.pk}']")
    assert row.locator(".after").inner_text() == "28.0 %"  # val accuracy after epoch 1
    old_row = page.locator(f"#compare-table tr[data-run-id='{old.pk}']")
    assert old_row.locator(".after").inner_text() == "—"  # its first evaluation is at 50 s
