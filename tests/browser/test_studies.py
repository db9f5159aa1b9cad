"""Algorithm studies in the dashboard: the Studies entry of the navigation and its list, a
study's page showing exactly what GET /api/studies/<id>/ answers (times to target with "∞"
for a miss, the ratios, the scores per condition and overall, the held-out gate, one
profile curve per algorithm drawn as steps), following the study while a run is pending,
a reused cell's mark, cancelling, fitting a 1,400 px window, and the board's Algorithms
part. The studies' runs get graded outcomes as tests/api/test_study_scores.py gives them
(no worker runs)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.browser.conftest import assert_accessible, screenshot

pytestmark = pytest.mark.browser

LONG_AGO = timezone.now() - dt.timedelta(hours=1)  # past the grace for late results
STUDY = {
    "name": "compressors",
    "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}}],
    "workloads": ["logreg-epsilon", "resnet20-cifar10"],
    "conditions": ["unlimited", "10mbit"],
    "seeds": [1, 2],
}
# Seconds to target of each base run by (algorithm, workload, condition): per seed; None a
# miss. topk misses half its logreg seeds at unlimited (an even median: infinite) and the
# all-reduce half its resnet seeds at 10mbit.
TIMES = {
    ("allreduce", "logreg-epsilon", "unlimited"): (10.0, 12.0),
    ("topk", "logreg-epsilon", "unlimited"): (20.0, None),
    ("allreduce", "resnet20-cifar10", "unlimited"): (40.0, 44.0),
    ("topk", "resnet20-cifar10", "unlimited"): (30.0, 30.0),
    ("allreduce", "logreg-epsilon", "10mbit"): (20.0, 20.0),
    ("topk", "logreg-epsilon", "10mbit"): (15.0, 15.0),
    ("allreduce", "resnet20-cifar10", "10mbit"): (90.0, None),
    ("topk", "resnet20-cifar10", "10mbit"): (60.0, 66.0),
}
# The held-out variants: topk misses resnet's, so it is gated out of resnet everywhere.
VARIANTS = {
    ("allreduce", "logreg-epsilon"): 10.0,
    ("topk", "logreg-epsilon"): 30.0,
    ("allreduce", "resnet20-cifar10"): 50.0,
    ("topk", "resnet20-cifar10"): None,
}


def _client():
    from rest_framework.test import APIClient

    from mlbench_master.accounts.users import issue_user_token

    client = APIClient()
    token = issue_user_token("root", create_user=True, superuser=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _end(run, reach_at: float | None) -> None:
    """The run FINISHED an hour ago; the evaluator's grades reach the target at `reach_at`
    seconds on the benchmark clock (None: never). Its summary names this machine's CPU, so
    a later study may reuse its cell."""
    from mlbench_master.api.models import Metric, Run
    from mlbench_worker.shared.evaluation import graded_name
    from mlbench_worker.shared.host_cpu import cpu_model

    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, started_at=LONG_AGO, finished_at=LONG_AGO,
        summary={"epochs": 2.0, "comm_bytes_to_target": 1000.0 * (reach_at or 0),
                 "hardware": {"cpu_model": cpu_model()}},
    )  # fmt: skip
    evals = [(1.0, 0.4)] + ([(reach_at, 0.85)] if reach_at else [])
    for i, (seconds, accuracy) in enumerate(evals):
        meta = {"elapsed": seconds, "epoch": i + 1.0, "step": (i + 1) * 16}
        Metric.objects.create(run=run, name=graded_name("val_accuracy"), value=accuracy,
                              metadata=meta)  # fmt: skip


def _graded_study(settings, leave_pending: bool = False) -> tuple[dict, object]:
    """The study, every run ended with its outcome; with `leave_pending` the last variant
    run is left as it is (returned, to end later)."""
    from mlbench_master.api.models import Run

    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_MAX_BANDWIDTH = 10000
    client = _client()
    created = client.post("/api/studies/", STUDY, format="json")
    assert created.status_code == 201, created.content
    study = created.json()
    last = None
    for cell in study["cells"]:
        name = cell["algorithm"].split(" ")[0]
        runs = list(Run.objects.filter(series_id=cell["series"]).order_by("seed"))
        if cell["variant"]:
            if leave_pending and (name, cell["workload"]) == ("topk", "resnet20-cifar10"):
                last = runs[0]
            else:
                _end(runs[0], VARIANTS[(name, cell["workload"])])
            continue
        for run, seconds in zip(
            runs, TIMES[(name, cell["workload"], cell["condition"])], strict=True
        ):
            _end(run, seconds)
    return study, last


def _same(shown: str | None, value: float | None) -> bool:
    """A data attribute the page wrote ("inf" for a miss) against the API's number."""
    if value is None:
        return shown == "inf"
    return shown is not None and float(shown) == pytest.approx(value)


def test_the_study_page_shows_what_the_api_answers_and_follows_it(page, settings):
    from mlbench_master.api.models import Run

    study, pending = _graded_study(settings, leave_pending=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/studies/{study['id']}/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.evaluate("document.body.dataset.pending") == "1"
    assert "pending" in page.locator("#score-note").inner_text()
    assert page.locator("#cancel-study").is_visible()  # its last run is still queued
    # The last run ends: the page, polling, shows the score and stops.
    _end(Run.objects.get(pk=pending.pk), None)
    page.wait_for_function("document.body.dataset.pending === '0'", timeout=20000)
    assert not page.locator("#cancel-study").is_visible()  # nothing left to cancel
    body = page.request.get(f"/api/studies/{study['id']}/").json()
    score = body["score"]
    assert score is not None

    # Every base cell: the API's median time (or "∞"), its ratio, its series' link.
    for cell in (c for c in body["cells"] if not c["variant"]):
        where = (
            f"#condition-{cell['condition']} tr[data-algorithm='{cell['algorithm']}'] "
            f"td[data-series='{cell['series']}']"
        )
        shown = page.locator(where)
        median = cell["median"]["time_to_target"]
        assert _same(shown.get_attribute("data-time"), median), cell
        text = shown.locator(".time").inner_text()
        assert text == ("∞" if median is None else f"{median:g} s"), (cell, text)
        ratio = next(
            r for r in score["ratios"]
            if (r["algorithm"], r["workload"], r["condition"])
            == (cell["algorithm"], cell["workload"], cell["condition"])
        )  # fmt: skip
        assert _same(shown.get_attribute("data-ratio"), ratio["ratio"]), ratio
        assert shown.locator(f"a[href='/series/{cell['series']}/']").count() == 1
        for run in cell["runs"]:
            assert shown.locator(f"a[href='/runs/{run['id']}/']").count() == 1
    labels = [a["label"] for a in body["algorithms"]]
    topk = labels[1]
    # topk's 30 s on resnet at unlimited is the fastest, but it missed its held-out variant.
    gated = page.locator(f"#condition-unlimited tr[data-algorithm='{topk}'] .gated")
    assert gated.count() == 1 and "∞" in gated.inner_text()
    gate = page.locator(f"#score-table tr[data-algorithm='{topk}'] .gate").inner_text()
    assert gate == "gated out of resnet20-cifar10"
    assert (
        "failed"
        in page.locator(f"#condition-10mbit tr[data-algorithm='{topk}'] .held-out").inner_text()
    )

    # The scores per condition and overall, as the API gives them.
    for label in labels:
        row = page.locator(f"#score-table tr[data-algorithm='{label}'] td.score")
        values = [float(row.nth(i).get_attribute("data-score")) for i in range(row.count())]
        wanted = [score["by_condition"][c][label] for c in body["conditions"]]
        assert values == pytest.approx([*wanted, score["overall"][label]])
        for condition in body["conditions"]:
            cell = page.locator(f"#condition-{condition} tr[data-algorithm='{label}'] td.score")
            assert float(cell.get_attribute("data-score")) == pytest.approx(
                score["by_condition"][condition][label]
            )

    # One step curve per algorithm per condition: the API's steps, held to tau_max.
    for condition in body["conditions"]:
        drawn = page.evaluate(
            """(id) => { const u = document.getElementById(id).lineChart.plot;
                return u.series.slice(1).map((s, i) => ({label: s.label,
                  points: u.data[0].map((x, j) => [x, u.data[i + 1][j]]).filter((p) => p[1] != null)}));
            }""",
            f"profile-{condition}",
        )
        assert [d["label"] for d in drawn] == labels
        for line in drawn:
            steps = score["profiles"][condition][line["label"]]
            if steps[-1][0] < score["tau_max"]:
                steps = [*steps, [score["tau_max"], steps[-1][1]]]
            flat = [v for point in line["points"] for v in point]
            assert flat == pytest.approx([v for step in steps for v in step]), (condition, line)

    # Fits 1,400 px: no table hides a column to its right, nor does the page.
    fit = page.evaluate(
        """() => ({wraps: [...document.querySelectorAll('#study-detail .table-wrap')]
                     .filter((w) => w.offsetParent !== null)
                     .map((w) => [w.scrollWidth, w.clientWidth]),
                   page: document.documentElement.scrollWidth, view: window.innerWidth})"""
    )
    assert all(scroll <= client for scroll, client in fit["wraps"]), fit
    assert fit["page"] <= fit["view"], fit
    screenshot(page, "study")
    assert_accessible(page)

    # The board's Algorithms part: each algorithm's score from this study, linked.
    page.goto("/board/")
    page.wait_for_selector("body[data-loaded='1']")
    ranked = page.request.get("/api/results/algorithms/").json()
    for section in ranked["sections"]:
        part = page.locator(
            f"#board-algorithms .board-section[data-condition='{section['condition']}']"
        )
        rows = part.locator("tbody tr")
        assert rows.count() == len(section["entries"])
        for i, entry in enumerate(section["entries"]):
            assert rows.nth(i).get_attribute("data-algorithm") == entry["algorithm"]
            assert rows.nth(i).locator(".rank").inner_text() == str(entry["rank"])
            assert float(rows.nth(i).locator(".score").get_attribute("data-score")) == (
                pytest.approx(score["by_condition"][section["condition"]][entry["algorithm"]])
            )
            link = rows.nth(i).locator(".study-link")
            assert link.get_attribute("href") == f"/studies/{study['id']}/"
    screenshot(page, "board-algorithms")
    assert_accessible(page)


def test_the_studies_list_a_reused_cell_and_cancelling(page, settings):
    from mlbench_master.api.models import Run

    first, _ = _graded_study(settings)
    # The same study again: its base cells are the first one's (reused), its held-out
    # variants drawn anew and queued.
    again = _client().post("/api/studies/", {**STUDY, "name": "again"}, format="json").json()
    assert all(c["reused"] for c in again["cells"] if not c["variant"])

    page.goto("/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Studies").click()
    page.wait_for_selector("#studies-table tbody tr")
    assert page.url.endswith("/studies/")
    current = page.locator("nav[aria-label='Main'] a[aria-current='page']")
    assert current.inner_text() == "Studies"
    listed = page.request.get("/api/studies/").json()
    rows = page.locator("#studies-table tbody tr")
    assert [int(rows.nth(i).get_attribute("data-study-id")) for i in range(rows.count())] == [
        s["id"] for s in listed
    ]
    assert [s["id"] for s in listed] == [again["id"], first["id"]]  # newest first
    done = page.locator(f"#studies-table tr[data-study-id='{first['id']}']")
    assert done.locator(".runs").inner_text() == "20 / 20"
    assert "topk (density 0.1)" in done.locator(".algorithms").inner_text()
    assert "resnet20-cifar10" in done.locator(".workloads").inner_text()
    assert done.locator(".conditions").inner_text() == "unlimited, 10mbit"
    assert "ended" in done.inner_text()
    screenshot(page, "studies")
    assert_accessible(page)

    page.locator(f"tr[data-study-id='{again['id']}'] .study-link").click()
    page.wait_for_selector("body[data-loaded='1']")
    assert current.inner_text() == "Studies"
    reused = page.locator("#condition-unlimited .reused").first
    assert reused.locator(f"a[href='/studies/{first['id']}/']").count() == 1
    assert page.locator("#condition-unlimited .reused").count() == 4  # 2 algorithms x 2 workloads
    assert_accessible(page)
    page.get_by_role("button", name="Cancel study").click()
    page.wait_for_function(
        "document.querySelector('#study-state').textContent.includes('cancelled')"
    )
    assert "cancelled" in page.locator("#study-status").inner_text()
    assert not page.locator("#cancel-study").is_visible()
    variants = [c["series"] for c in again["cells"] if c["variant"]]
    assert set(Run.objects.filter(series_id__in=variants).values_list("state", flat=True)) == {
        Run.CANCELLED
    }
    # The first study's runs, reused by the cancelled one, are left as they were.
    assert not Run.objects.filter(
        series_id__in=[c["series"] for c in first["cells"]], state=Run.CANCELLED
    ).exists()
