"""The backend benchmark in the dashboard: its run page draws bus bandwidth against
message size (one line per backend and collective) with the table of cells, the compare page
overlays several runs labelled with their network settings, and the form sends such a run
without the training fields. The points are made by the worker's own code (records.py), in
the shape its runs store them."""

import datetime as dt

import pytest
from django.utils import timezone

from mlbench_worker.backend_benchmark import records, stats
from mlbench_worker.training.metric_sink import Reporter
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.seed import make_run, store_points

pytestmark = pytest.mark.browser

TASK = "backend-benchmark"
SIZES = [2**k for k in range(10, 22, 2)]  # 1 KiB .. 1 MiB, powers of 4: 6 sizes
BACKENDS = ("mpi", "gloo")
CELLS = len(SIZES) * len(stats.OPS) * len(BACKENDS)


class _Collect(Reporter):
    def __init__(self, run_id):
        super().__init__(str(run_id))
        self.points = []

    def emit(self, point):
        self.points.append(point)


def comm_run(name, mbit, latency=None, ago=600.0):
    """A FINISHED benchmark run on a link of `mbit` Mbit/s: each message takes 50 us plus
    its size at the link's speed (the mpi backend 10 % faster than gloo)."""
    from mlbench_master.api.models import Run

    created = timezone.now() - dt.timedelta(seconds=ago)
    run = Run.objects.create(
        name=name, task=TASK, backend="mpi,gloo", target="", num_workers=2, num_cpus=1.0,
        max_bandwidth=mbit, latency=latency, state=Run.FINISHED, created_at=created,
        started_at=created, finished_at=created + dt.timedelta(seconds=60),
    )  # fmt: skip
    collect = _Collect(run.pk)
    rows = []
    for size in SIZES:
        for op in stats.OPS:
            for backend in BACKENDS:
                seconds = 50e-6 + size * 8 / (mbit * 1e6) * (1.0 if backend == "mpi" else 1.1)
                times = [seconds, seconds * 1.2, seconds * 1.05]
                row = stats.summarize(op, backend, size, 2, times, warmup=5, capped=False)
                rows.append(row)
                records.post_row(collect, row, elapsed=len(rows) * 0.5)
    store_points(collect.points)
    top = records.peak(rows)
    run.summary = {
        "task": TASK, "kind": "measurement", "num_workers": 2, "backend": "mpi,gloo",
        "device": "cpu", "busbw_mbps": top["busbw_median_mbps"],
        "peak": {k: top[k] for k in ("op", "backend", "size")}, "results": rows,
        "measured": len(rows), "not_measured": [], "stop_reason": "sweep complete",
        "elapsed": 60.0,
    }  # fmt: skip
    run.save()
    return run


def _series(page, chart_id):
    return page.evaluate(
        f"""() => {{
        const u = document.querySelector('#{chart_id}').lineChart.plot;
        return {{labels: u.series.slice(1).map((s) => s.label), x: u.data[0],
                 log: u.scales.x.distr}};
    }}"""
    )


def test_the_run_page_draws_bus_bandwidth_per_backend_and_collective(page):
    run = comm_run("comm 1000", 1000)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        f"Number(document.querySelector('#chart-busbw')?.dataset.points) === {CELLS}"
    )
    # an ended run is drawn from its summary's results (a running one from its points, below)
    assert page.locator("#comm-card").get_attribute("data-source") == "summary"
    drawn = _series(page, "chart-busbw")
    assert sorted(drawn["labels"]) == sorted(
        f"{b} {t}" for b in BACKENDS for t in ("all-reduce", "broadcast")
    )
    assert drawn["x"] == SIZES and drawn["log"] == 3  # sizes on a logarithmic axis

    table = page.locator("#comm-table tbody tr")
    assert table.count() == CELLS
    first = page.locator("#comm-table tbody tr[data-op='allreduce'][data-backend='mpi']").first
    assert "1 KiB" in first.inner_text()
    # the training view is not shown for a measurement, its result is
    assert page.locator("#training-card").is_hidden() and page.locator("#split-card").is_hidden()
    summary = page.locator("#run-summary").inner_text()
    assert "Highest bus bandwidth" in summary and "sweep complete" in summary
    config = page.locator("#run-config").inner_text()
    assert "Target" not in config and "Dataset" not in config
    screenshot(page, "backend-benchmark-run")
    assert_accessible(page)


def test_a_run_still_measuring_draws_from_its_points(page):
    """No summary yet: the curves come from the points and their metadata (details=1)."""
    from mlbench_master.api.models import Run

    run = comm_run("measuring", 1000)
    Run.objects.filter(pk=run.pk).update(state=Run.STARTED, summary={}, finished_at=None)
    page.set_default_timeout(5000)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        f"Number(document.querySelector('#chart-busbw')?.dataset.points) === {CELLS}"
    )
    assert page.locator("#comm-card").get_attribute("data-source") == "points"


def test_a_training_run_page_keeps_its_charts(page):
    run = make_run("training", 2)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-accuracy')?.dataset.points) > 0")
    assert page.locator("#comm-card").is_hidden() and page.locator("#training-card").is_visible()


def test_the_compare_page_overlays_runs_labelled_with_their_network(page):
    slow = comm_run("shaped", 100, latency=5.0, ago=1200)
    fast = comm_run("gigabit", 1000)
    page.goto(f"/compare/?runs={slow.pk},{fast.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    chart = "document.querySelector('#chart-comm-compare')"
    page.wait_for_function(f"Number({chart}?.dataset.points) === {2 * CELLS}")
    labels = _series(page, "chart-comm-compare")["labels"]
    assert "shaped (100 Mbit/s, 5 ms) · mpi all-reduce" in labels
    assert "gigabit (1000 Mbit/s) · gloo broadcast" in labels
    assert len(labels) == 8
    # nothing of training to show for these runs
    assert page.locator("#accuracy-card").is_hidden() and page.locator("#results-card").is_hidden()
    row = page.locator(f"#comm-compare-table tr[data-run-id='{slow.pk}']")
    assert row.locator(".network").inner_text() == "100 Mbit/s, 5 ms"
    # a 100 Mbit/s link's bus bandwidth stays below 100 Mbit/s, a gigabit one's below 1000
    slow_peak = float(row.locator(".peak").inner_text().split(" Mbit/s")[0])
    assert 50 < slow_peak < 100

    page.get_by_label("all-reduce").check()
    page.wait_for_function(f"Number({chart}.dataset.points) === {CELLS}")
    assert all("all-reduce" in label for label in _series(page, "chart-comm-compare")["labels"])
    screenshot(page, "backend-benchmark-compare")
    assert_accessible(page)

    # beside a training run: both views, each with its own runs
    training = make_run("training", 2)
    page.goto(f"/compare/?runs={slow.pk},{training.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-compare')?.dataset.points) > 0")
    page.wait_for_function(f"Number({chart}?.dataset.points) === {CELLS}")
    assert page.locator("#accuracy-card").is_visible()
    assert page.locator(f"#compare-table tr[data-run-id='{training.pk}']").count() == 1
    assert page.locator(f"#compare-table tr[data-run-id='{slow.pk}']").count() == 0


def test_the_form_sends_a_benchmark_run_without_training_fields(page):
    from mlbench_master.api.models import Run

    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("button", name="New run").click()
    page.get_by_label("Run name").fill("comm from the form")
    page.get_by_label("Workers").fill("2")
    page.get_by_label("Benchmark task").select_option(TASK)
    for field in ("target", "dataset", "light_target", "max_epochs"):
        assert page.locator(f"#f-{field}").is_disabled(), field
    assert page.locator("#f-backend").input_value() == ""  # every backend
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="comm from the form").first.wait_for()
    run = Run.objects.get(name="comm from the form")
    assert (run.task, run.backend, run.target, run.dataset) == (TASK, "mpi,gloo", "", "auto")

    # back to a training task: its fields and backends are as they were
    page.get_by_role("button", name="New run").click()
    page.get_by_label("Benchmark task").select_option("resnet20-cifar10")
    assert page.locator("#f-target").is_enabled() and page.locator("#f-dataset").is_enabled()
    assert page.locator("#f-backend").input_value() == "mpi"
    assert page.locator("#f-backend option[value='']").count() == 0
