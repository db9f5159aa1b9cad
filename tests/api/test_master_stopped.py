"""The master stops while its database does not answer (mlbench_master/runs/stopping.py), and
its next start settles what it could not record (unsettled.py, reconcile.py)."""

from __future__ import annotations

import socket
import time

import pytest

from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle, stopping, unsettled
from tests.e2e.live import script

pytestmark = pytest.mark.django_db


@pytest.fixture
def local_home(settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_LOCAL_NETWORK = "off"
    settings.MLBENCH_LOCAL_WORKERS = 2
    return tmp_path


@pytest.fixture
def silent_database(monkeypatch):
    """The database's address made a socket that takes connections and never answers (a
    hung server): every new connection, in any thread, waits on it."""
    from django.db import connections

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    monkeypatch.setitem(connections.settings["default"], "HOST", "127.0.0.1")
    monkeypatch.setitem(connections.settings["default"], "PORT", str(server.getsockname()[1]))
    yield
    server.close()  # the waiting connections are reset: their thread ends


def test_the_next_start_settles_a_run_the_stopping_master_could_not_mark(
    make_run, redis_settings, local_home
):
    from mlbench_master.runs.reconcile import reconcile

    stopped = make_run(state=Run.STARTED, num_workers=1)
    ended = make_run(state=Run.FINISHED, num_workers=1)  # ended before the next start
    unsettled.record(local_home, [str(stopped.pk), str(ended.pk)], stopping.SETTLED_AT_START)

    notes = reconcile()

    assert notes[0] == f"run {stopped.pk}: FAILED ({stopping.SETTLED_AT_START})"
    stopped.refresh_from_db()
    assert (stopped.state, stopped.reason) == (Run.FAILED, stopping.SETTLED_AT_START)
    assert Run.objects.get(pk=ended.pk).state == Run.FINISHED
    assert unsettled.pending(local_home) == {}
    assert not (local_home / unsettled.FILE).exists()


def test_a_stopping_master_moves_no_queue(make_run):
    active = make_run(state=Run.STARTED)
    queued = make_run(state=Run.QUEUED)
    assert lifecycle.mark_failed(active, stopping.MASTER_STOPPED, start_next_run=False)
    assert Run.objects.get(pk=queued.pk).state == Run.QUEUED


@pytest.mark.mpi
def test_a_database_that_hangs_neither_holds_the_stop_up_nor_keeps_a_run_alive(
    make_run, local_home, silent_database
):
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.local import launch_processes
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment

    run = make_run(state=Run.STARTED, num_workers=2, custom_image_command=script("sleeper.py"))
    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    try:
        deadline = time.monotonic() + 60
        while len(launch_processes(local_home, run.pk)) < 3:  # the wrapper, mpirun, ranks
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        report = stopping.StopReport()
        stopping.mark_runs_failed(report, driver, patience=1.0)  # gives up, not hung
        assert report.database_error == "no answer within 1 s" and report.marked == []
        stopping.stop_launches(report, driver, local_home)
        assert launch_processes(local_home, run.pk) == []
        assert report.unrecorded == [str(run.pk)]
        assert report.lines() == [
            f"run {run.pk} was stopped but could not be marked FAILED: the database did not "
            "answer (no answer within 1 s); it will be settled at the next start"
        ]
        assert unsettled.pending(local_home) == {str(run.pk): stopping.SETTLED_AT_START}
    finally:
        execution.kill()
