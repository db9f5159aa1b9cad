"""Through the run's job: the job runs in the run's image, fails a run whose image never
comes, and a cancel through the API ends the run with the chart's image back."""

from __future__ import annotations

import threading

import pytest

from tests.kubernetes.conftest import STS
from tests.kubernetes.custom_image.helpers import (
    BROKEN,
    CUSTOM,
    PULL_WAIT,
    assert_restored,
    driver_for,
    stored_run,
)
from tests.kubernetes.emulator import wait_for


@pytest.mark.django_db
@pytest.mark.parametrize(("code", "state"), [(0, "FINISHED"), (3, "FAILED")])
def test_the_job_runs_in_the_run_image_and_puts_the_chart_image_back(
    rollout, shell, master, chart_image, code, state
):
    from mlbench_master.runs.jobs import run_job

    run = stored_run()
    shell.launch_code = code
    assert run_job(run.pk) == state
    run.refresh_from_db()
    assert run.exit_code == code
    assert run.job_metadata["kubernetes"]["image"] == {"custom": CUSTOM, "original": chart_image}
    [(pod, image, _command)] = shell.launches()
    assert (pod, image) == (f"{STS}-0", CUSTOM)
    assert_restored(rollout, chart_image)


@pytest.mark.django_db
def test_the_job_fails_a_run_whose_image_never_comes_naming_the_image(
    emulator, rollout, shell, chart_image, monkeypatch
):
    from mlbench_master.cluster import drivers
    from mlbench_master.runs.jobs import run_job

    monkeypatch.setattr(
        drivers,
        "get_driver",
        lambda name=None: driver_for(emulator, shell, ready_timeout=PULL_WAIT),
    )
    run = stored_run(custom_image_name=BROKEN)
    assert run_job(run.pk) == "FAILED"
    run.refresh_from_db()
    assert run.reason.startswith(f"workers not Ready after {PULL_WAIT} s")
    assert f"image {BROKEN!r} cannot be pulled: ImagePullBackOff" in run.reason
    assert_restored(rollout, chart_image)


@pytest.mark.django_db(transaction=True)
def test_a_run_cancelled_through_the_api_ends_cancelled_with_the_chart_image_back(
    rollout, shell, master, chart_image
):
    from django.db import connection

    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.jobs import run_job

    run = stored_run()
    shell.launch_code = None
    ended: list[str] = []

    def job():
        try:
            ended.append(run_job(run.pk))
        finally:
            connection.close()

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    wait_for(lambda: shell.launches(), "the launch", limit=20)
    assert lifecycle.cancel_run(RunRow.objects.get(pk=run.pk))  # what DELETE /api/runs/<id>/ does
    thread.join(20)
    assert ended == ["CANCELLED"]
    assert RunRow.objects.get(pk=run.pk).reason == "cancelled by a user"
    assert_restored(rollout, chart_image)
