"""The New run form follows the master's run rules as served (GET /api/runs/defaults/): it
keeps no list of its own (static/dashboard/js/form_rules.js), so when a rule of the master
changes the form offers what the changed rule allows, and the run it starts is the one the
API accepts. tests/rules/test_form_rules.py holds the same rules to shared cases."""

import dataclasses

import pytest

from tests.browser.test_runs import open_form

pytestmark = pytest.mark.browser

NAMED = "(els) => els.map((e) => e.name)"


def test_the_backends_offered_follow_the_implementation_catalogue(page, settings, monkeypatch):
    from mlbench_master.api.models import Run
    from mlbench_master.runs import lifecycle
    from mlbench_worker.shared import implementation_catalogue

    # The catalogue as if torch-ddp's entry said it also runs on mpi and not on nccl: the
    # master serving it is this test's live server, in this process.
    settings.MLBENCH_MAX_GPUS = 1
    ddp = implementation_catalogue.IMPLEMENTATIONS["torch-ddp"]
    changed = dataclasses.replace(ddp, backends=("mpi", "gloo"))
    monkeypatch.setitem(implementation_catalogue.IMPLEMENTATIONS, "torch-ddp", changed)

    open_form(page)
    backend = page.get_by_label("Communication backend")
    option = lambda name: backend.locator(f"option[value='{name}']")  # noqa: E731
    page.get_by_label("Implementation", exact=True).select_option("torch-ddp")
    assert backend.input_value() == "mpi"  # the table's default, one it now runs on
    assert not option("mpi").is_disabled() and not option("gloo").is_disabled()
    gpus = page.get_by_label("Use GPUs")
    gpus.check()
    assert option("nccl").is_disabled() and backend.input_value() == "mpi"
    gpus.uncheck()

    page.get_by_label("Run name").fill("ddp on mpi")
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="ddp on mpi").first.wait_for()
    run = Run.objects.get(name="ddp on mpi")
    assert (run.implementation, run.backend) == ("torch-ddp", "mpi")
    lifecycle.cancel_run(run)


def test_a_measurement_disables_exactly_the_served_training_fields(page):
    open_form(page)
    served = page.evaluate("fetch('/api/runs/defaults/').then((r) => r.json())")
    form = "#new-run-form [name]"
    names = set(page.eval_on_selector_all(form, NAMED))
    before = set(page.eval_on_selector_all(f"{form}:disabled", NAMED))
    assert "lr_schedule" in served["training_only"] and "lr_schedule" not in before

    task = page.get_by_label("Benchmark task")
    task.select_option("backend-benchmark")
    now = set(page.eval_on_selector_all(f"{form}:disabled", NAMED))
    options = {n for n in now if n.startswith("algorithm_options.")}  # the chosen one's too
    assert now - before - options == set(served["training_only"]) & names

    task.select_option(served["defaults"]["task"])
    assert set(page.eval_on_selector_all(f"{form}:disabled", NAMED)) == before
