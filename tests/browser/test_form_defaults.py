"""The New run form shows the master's run defaults (GET /api/runs/defaults/), and a run
started from it without changing anything but its name stores exactly what the API stores
for a request with only a name."""

import pytest

from tests.api.test_run_defaults import settings_of
from tests.browser.test_runs import open_form

pytestmark = pytest.mark.browser


def test_the_form_shows_the_served_defaults_and_starts_the_same_run(page, live_server):
    from rest_framework.test import APIClient

    from mlbench_master.api.models import Run
    from mlbench_master.api.serializers import RunSerializer
    from mlbench_master.runs import lifecycle

    open_form(page)
    served = page.evaluate("fetch('/api/runs/defaults/').then((r) => r.json())")
    defaults = served["defaults"]
    assert page.get_by_label("Workers").input_value() == str(defaults["num_workers"])
    assert float(page.get_by_label("CPUs per worker").input_value()) == defaults["num_cpus"]
    assert page.get_by_label("Bandwidth (Mbit/s)").input_value() == str(defaults["max_bandwidth"])
    assert page.get_by_label("Benchmark task").input_value() == defaults["task"]
    assert page.get_by_label("Communication backend").input_value() == defaults["backend"]
    assert page.get_by_label("Dataset").input_value() == defaults["dataset"]
    own = served["tasks"][defaults["task"]]
    budget = page.get_by_label("Time budget (s)")
    page.wait_for_function(
        "(el) => el.placeholder !== ''", arg=budget.element_handle()
    )  # filled in once the page has read the table
    assert budget.get_attribute("placeholder").startswith(f"{own['time_budget']:g}")
    assert (
        page.get_by_label("Time limit (s)")
        .get_attribute("placeholder")
        .startswith(str(own["time_limit"]))
    )

    page.get_by_label("Run name").fill("plain")
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="plain").first.wait_for()
    from_form = Run.objects.get(name="plain")
    lifecycle.cancel_run(from_form)

    staff = Run.objects.model._meta.get_field("created_by").related_model.objects.first()
    client = APIClient()
    client.force_authenticate(staff)
    response = client.post("/api/runs/", {"name": "plain"}, format="json")
    assert response.status_code == 201, response.json()
    assert settings_of(RunSerializer(from_form).data) == settings_of(response.json())


def test_resuming_from_the_form_keeps_the_parents_settings_but_what_was_changed(page):
    """Only the fields changed from what the form was served with are sent: the rest of the
    new run comes from the run it resumes, not from the form's defaults."""
    from mlbench_master.api.models import Run
    from tests.browser.test_resume import _checkpoint, _run

    parent = _run(Run.FAILED, name="parent", latency=20.0)  # 500 Mbit/s, gloo, paper...
    _checkpoint(parent, 2)
    open_form(page)
    page.get_by_label("Run name").fill("continued")
    page.get_by_label("CPUs per worker").fill("1.5")
    page.locator("#new-run details summary").click()
    page.get_by_label("Resume from run").fill(str(parent.pk))
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="continued").first.wait_for()
    child = Run.objects.get(name="continued")
    assert child.resumed_from == parent.pk and child.num_cpus == 1.5
    assert (child.latency, child.max_bandwidth, child.backend, child.target) == (
        20.0, 500, "gloo", "paper",
    )  # fmt: skip
    assert (child.max_epochs, child.time_budget, child.time_limit) == (40, 3600.0, 4500)


def test_the_form_offers_the_chosen_algorithms_options_only(page):
    from mlbench_master.api.models import Run

    open_form(page)
    rank = page.get_by_label("Rank (powersgd)")
    assert rank.is_hidden() and page.get_by_label("Precision (allreduce)").is_visible()
    page.get_by_label("Algorithm", exact=True).select_option("powersgd")
    assert rank.is_visible() and page.get_by_label("Precision (allreduce)").is_hidden()
    assert rank.input_value() == "2"  # the catalogue's default

    page.get_by_label("Run name").fill("compressed")
    rank.fill("0")
    page.watch.allowed_status.add(400)
    page.get_by_role("button", name="Start run").click()
    error = page.locator("#e-algorithm")
    error.wait_for()
    assert "rank must be at least 1, not 0" in error.inner_text()
    assert not Run.objects.filter(name="compressed").exists()

    rank.fill("4")
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="compressed").first.wait_for()
    run = Run.objects.get(name="compressed")
    assert (run.algorithm, run.algorithm_options) == (
        "powersgd",
        {"rank": 4, "min_compression_rate": 2.0, "warmup_steps": 0},
    )
    row = page.locator(f"#runs-table tr[data-run-id='{run.pk}']")
    row.wait_for()
    assert "powersgd (min_compression_rate 2, rank 4, warmup_steps 0)" in row.inner_text()
