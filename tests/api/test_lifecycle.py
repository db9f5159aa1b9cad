"""mlbench_master.runs: the only place Run.state changes; transitions are idempotent."""

import pytest

from mlbench_master import runs
from mlbench_master.api.models import Run

pytestmark = pytest.mark.django_db


def test_happy_path(make_run):
    run = make_run(state=Run.INITIALIZED)
    assert runs.active_run() == run
    assert runs.mark_started(run) and run.state == Run.STARTED and run.started_at
    assert not runs.mark_started(run)  # only from INITIALIZED
    assert runs.mark_finished(run, 0) and run.state == Run.FINISHED and run.exit_code == 0
    assert runs.active_run() is None
    # a finished run is never moved back
    assert not runs.mark_failed(run, "late failure")
    assert not runs.cancel_run(run)
    assert run.state == Run.FINISHED


def test_nonzero_exit_is_a_failure(make_run):
    run = make_run(state=Run.STARTED)
    assert runs.mark_finished(run, 137)
    assert run.state == Run.FAILED and run.exit_code == 137 and "137" in run.reason


def test_failed_with_reason(make_run):
    run = make_run(state=Run.STARTED)
    assert runs.mark_failed(run, "time limit of 60 s reached", exit_code=None)
    assert run.reason == "time limit of 60 s reached" and run.finished_at


def test_cancel_then_late_failure_keeps_cancelled(make_run):
    run = make_run(state=Run.STARTED)
    assert runs.cancel_run(run)
    assert run.state == Run.CANCELLED
    stale = Run.objects.get(pk=run.pk)
    assert not runs.mark_failed(stale, "mpirun killed")
    assert Run.objects.get(pk=run.pk).state == Run.CANCELLED


def test_create_run_conflict_and_light_target(db, redis_settings):
    run = runs.create_run({"name": "a", "num_workers": 1, "light_target": True})
    assert run.target == "light" and run.job_id
    with pytest.raises(runs.RunConflict, match=f"run {run.pk}"):
        runs.create_run({"name": "b", "num_workers": 1})
