"""The benchmark clock is one fact: for the same run, the dashboard's accuracy chart,
`mlbench report` and the master's results place each evaluation at the benchmark time
stored with its point (metadata `elapsed`, served by GET /api/metrics/ as `elapsed`), not at
a time rebuilt from dates.

Two runs whose dates are a poor guide to their clock: the evaluator graded run A's
predictions 90 s after each evaluation (its grade points are dated when graded), and run B's
worker posted the metadata but no `elapsed` series (a custom command) and was cancelled
before any summary, so its dates include the 20 s start-up."""

import datetime as dt
import io
import json
from contextlib import redirect_stdout

import pytest
from django.utils import timezone

from tests.browser.seed import store_points, training_points

pytestmark = pytest.mark.browser
STARTUP = 20.0
GRADED_LATE = 90.0
EVALUATIONS = [30.0, 60.0]  # the benchmark clock of each epoch's evaluation (seed.py)
TRAINING = [15.0, 30.0, 45.0, 60.0]  # of each training report (two per epoch)


def _run(name: str, start: dt.datetime, state: str = "STARTED"):
    from mlbench_master.api.models import Run

    end = start + dt.timedelta(seconds=STARTUP + 70) if state != "STARTED" else None
    return Run.objects.create(
        name=name, num_workers=1, num_cpus=1.0, target="light", state=state,
        created_at=start - dt.timedelta(seconds=5), started_at=start, max_epochs=2,
        finished_at=end,
    )  # fmt: skip


def _graded_late(run_id: int, start: dt.datetime, points: list[dict]) -> list[dict]:
    """The evaluator's grade of each evaluation, dated when it was graded."""
    return [
        {
            "run_id": run_id,
            "name": "evaluated_val_accuracy",
            "value": p["value"],
            "date": (start + dt.timedelta(seconds=STARTUP + el + GRADED_LATE)).isoformat(),
            "metadata": {**p["metadata"], "examples": 10000, "dataset": "synthetic"},
        }
        for p in points
        if p["name"] == "val_accuracy" and (el := p["metadata"]["elapsed"]) is not None
    ]


def chart_x(page) -> list[float]:
    return page.evaluate(
        "() => Array.from(document.getElementById('chart-accuracy').lineChart.plot?.data[0] ?? [])"
    )


def _drawn(page, run_id: int, n: int) -> list[float]:
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        f"Number(document.querySelector('#chart-accuracy')?.dataset.points) === {n}"
    )
    return chart_x(page)


def _reported(url: str, token: str, run_id: int) -> dict:
    from mlbench_worker.client.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--url", url, "--token", token, "report", str(run_id), "--json"]) == 0
    return json.loads(out.getvalue())["runs"][0]


def _results_curve(run_id: int) -> list[float]:
    from mlbench_master.api.models import Run
    from mlbench_master.results import stored

    return [seconds for seconds, _ in stored.load([Run.objects.get(pk=run_id)])[0].result().curve]


def test_chart_report_and_results_show_the_stored_clock(page, live_server):
    from mlbench_master.accounts.users import issue_user_token

    start = timezone.now() - dt.timedelta(hours=1)
    graded = _run("graded late", start)
    points = training_points(graded.pk, start, range(2), startup=STARTUP, intervals=2)
    store_points(points + _graded_late(graded.pk, start, points))
    custom = _run("no elapsed series", start, state="CANCELLED")  # no summary
    store_points(
        p
        for p in training_points(custom.pk, start, range(2), startup=STARTUP, intervals=2)
        if p["name"] != "elapsed"
    )
    token = issue_user_token("reader", create_user=True)

    # Run A: evaluator 2 + reported 2 + training 4 points, all on the stored clock.
    assert _drawn(page, graded.pk, 8) == pytest.approx(TRAINING, abs=1e-6)
    report = _reported(live_server.url, token, graded.pk)
    assert report["evaluation"] == "evaluated"
    assert report["accuracy_at"] == pytest.approx(EVALUATIONS[-1])
    assert _results_curve(graded.pk) == pytest.approx(EVALUATIONS)

    # Run B: reported 2 + training 4 points; the start-up is not on the clock.
    assert _drawn(page, custom.pk, 6) == pytest.approx(TRAINING, abs=1e-6)
    report = _reported(live_server.url, token, custom.pk)
    assert report["accuracy_at"] == pytest.approx(EVALUATIONS[-1])
    assert _results_curve(custom.pk) == pytest.approx(EVALUATIONS)
