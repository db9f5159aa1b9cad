"""The run page's "Resume" button: shown for a FAILED or CANCELLED run with a checkpoint,
it starts a new run with the same settings that continues from that checkpoint, and the
new run's page says where it started."""

import datetime as dt
import re

import pytest

from tests.browser.conftest import screenshot
from tests.checkpoints import IDENTITY

pytestmark = pytest.mark.browser


def _run(state, **fields):
    from mlbench_master.api.models import Run

    values = dict(
        name="long training",
        state=state,
        num_workers=2,
        num_cpus=1.0,
        max_bandwidth=500,
        backend="gloo",
        target="paper",
        dataset="auto",
        max_epochs=40,
        time_budget=3600.0,
        time_limit=4500,
    )
    values.update(fields)
    return Run.objects.create(**values)


def _checkpoint(run, epoch):
    from mlbench_master.api.models import Metric

    Metric.objects.create(
        run=run,
        name="checkpoint",
        value=float(epoch),
        date=dt.datetime.now(dt.UTC),
        metadata={
            "epoch": epoch,
            "step": 98 * epoch,
            "elapsed": 61.0 * epoch,
            "identity": IDENTITY,
        },
    )


def _open(page, run):
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")


def test_resume_button_starts_a_run_that_continues_the_checkpoint(page):
    from mlbench_master.api.models import Run

    failed = _run(Run.FAILED, reason="time limit of 4500 s reached; all ranks were stopped")
    _checkpoint(failed, 1)
    _checkpoint(failed, 2)
    _open(page, failed)
    button = page.get_by_role("button", name="Resume from epoch 2")
    button.wait_for()
    button.click()
    assert "last checkpoint (epoch 2)" in page.locator("#confirm-text").inner_text()
    page.get_by_role("button", name="Yes").click()
    page.wait_for_url(
        lambda url: bool(re.search(r"/runs/\d+/$", url)) and f"/runs/{failed.pk}/" not in url
    )
    child = Run.objects.exclude(pk=failed.pk).get()
    assert page.url.endswith(f"/runs/{child.pk}/")
    assert child.resumed_from == failed.pk and child.name == "long training (resumed)"
    assert (
        child.num_workers, child.num_cpus, child.max_bandwidth, child.backend, child.target,
        child.max_epochs, child.time_budget, child.time_limit,
    ) == (2, 1.0, 500, "gloo", "paper", 40, 3600.0, 4500)  # fmt: skip
    assert child.dataset == "synthetic"  # the checkpoint's, not "auto"
    assert child.manifest["resumed_from"]["epoch"] == 2
    assert child.state == Run.INITIALIZED and child.job_id  # queued on the test Redis

    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#run-resumed")
    note.wait_for()
    assert f"run {failed.pk}" in note.inner_text() and "at epoch 2" in note.inner_text()
    assert "did not start from scratch" in note.inner_text()
    assert note.get_by_role("link", name=f"run {failed.pk}").get_attribute("href") == (
        f"/runs/{failed.pk}/"
    )
    screenshot(page, "run-resumed")


def test_no_resume_without_a_checkpoint_or_for_a_finished_run(page):
    from mlbench_master.api.models import Run

    early = _run(Run.CANCELLED, name="cancelled early")  # no checkpoint reported
    _open(page, early)
    page.wait_for_load_state("networkidle")
    assert page.locator("#resume-run").is_hidden()

    finished = _run(Run.FINISHED, name="done")
    _checkpoint(finished, 3)
    _open(page, finished)
    page.wait_for_load_state("networkidle")
    assert page.locator("#resume-run").is_hidden()


def test_a_resume_the_master_refuses_is_shown(page):
    from mlbench_master.api.models import Run

    cancelled = _run(Run.CANCELLED, name="other setup")
    _checkpoint(cancelled, 1)
    active = _run(Run.STARTED, name="busy")  # a run is active: the master answers 409
    _open(page, cancelled)
    page.watch.allowed_status.add(409)
    page.get_by_role("button", name="Resume from epoch 1").click()
    page.get_by_role("button", name="Yes").click()
    status = page.locator("#run-status")
    page.wait_for_function("document.querySelector('#run-status').textContent.length > 0")
    assert "Could not resume" in status.inner_text() and f"run {active.pk}" in status.inner_text()
    assert Run.objects.filter(resumed_from=cancelled.pk).count() == 0


def test_the_master_gives_the_resumed_run_its_parents_settings(page, settings):
    """The button sends a name and resume_from only: the latency below, which the page
    never sent, and an old limit without a budget come from the parent (run_rules); a
    parent's bandwidth above today's limit is refused with the reason, not replaced."""
    from mlbench_master import run_rules
    from mlbench_master.api.models import Run

    old = _run(Run.FAILED, name="old", time_budget=None, time_limit=7200, latency=20.0)
    _checkpoint(old, 5)
    _open(page, old)
    page.get_by_role("button", name="Resume from epoch 5").click()
    page.get_by_role("button", name="Yes").click()
    page.wait_for_url(lambda url: f"/runs/{old.pk}/" not in url)
    child = Run.objects.get(resumed_from=old.pk)
    assert (child.latency, child.max_bandwidth, child.time_budget, child.time_limit) == (
        20.0, 500, None, 7200,
    )  # fmt: skip
    assert run_rules.effective_time_budget(child) == 7200 - run_rules.TIME_LIMIT_MARGIN
    Run.objects.filter(pk=child.pk).update(state=Run.CANCELLED)

    settings.MLBENCH_MAX_BANDWIDTH = 100
    _open(page, old)
    page.watch.allowed_status.add(400)
    page.get_by_role("button", name="Resume from epoch 5").click()
    page.get_by_role("button", name="Yes").click()
    page.wait_for_function("document.querySelector('#run-status').textContent.length > 0")
    status = page.locator("#run-status").inner_text()
    assert "Could not resume" in status and "max_bandwidth" in status, status
    assert f"the value of run {old.pk}" in status
    assert Run.objects.filter(resumed_from=old.pk).count() == 1
