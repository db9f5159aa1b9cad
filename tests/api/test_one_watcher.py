"""One job watches a run at a time (mlbench_master/runs/watching.py), whatever Redis knows.

With real PostgreSQL, the real local driver (mpirun, 1 rank) and real processes: a job that
holds a run's watch lock in another process stands for a work horse whose RQ worker quit
(Redis knows no job in progress). Reconciliation must leave that run to it, and a second
job must leave at once without touching the run; once the holder dies (SIGKILL), the lock is
free at once and the run's job is queued again. A job whose database session is cut while
another takes the lock leaves the run without killing its launch or ending it. The file
lock an SQLite master uses is checked the same way, with a process that holds it and dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from django.db import connection, connections

from mlbench_master.api.models import Run
from mlbench_master.runs import jobs, lifecycle, watching
from mlbench_master.runs.reconcile import WATCHED_UNSEEN, reconcile

ROOT = Path(__file__).resolve().parents[2]
SLEEP = "python -c \"import time; print('hi', flush=True); time.sleep({})\""

# Takes run argv[1]'s watch lock as a job would, says so, and keeps it until killed.
HOLDER = (
    "import sys, time, django\n"
    "django.setup()\n"
    "from mlbench_master.runs import watching\n"
    "with watching.hold(int(sys.argv[1])) as mine:\n"
    "    print('held' if mine else 'refused', flush=True)\n"
    "    time.sleep(600)\n"
)


def _launch(run: Run) -> object:
    """Launch `run` with the real local driver as run_job would, its record stored; the driver."""
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment

    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, execution.record)
    return driver


def _holder(run_id: int, database_url: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url}
    env["DJANGO_SETTINGS_MODULE"] = "mlbench_master.settings"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_id)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def _wait(condition, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _jobs_queued() -> int:
    from rq import Queue

    from mlbench_master.runs import jobqueue

    return Queue("runs", connection=jobqueue.connection()).count


@pytest.mark.mpi
def test_a_run_a_live_job_watches_gets_no_second_job(make_run, redis_settings, test_database_url):
    run = make_run(state=Run.STARTED, num_workers=1, custom_image_command=SLEEP.format(4))
    driver = _launch(run)
    spec = lifecycle.run_spec(run)
    Run.objects.filter(pk=run.pk).update(job_id="a-job-the-new-redis-never-knew")
    holder = _holder(run.pk, test_database_url)
    try:
        assert watching.watched(run.pk)
        # Reconciliation (Redis knows no job in progress) leaves the run to its job ...
        notes = reconcile()
        assert notes == [f"run {run.pk}: {WATCHED_UNSEEN}"]
        assert Run.objects.get(pk=run.pk).job_id == "a-job-the-new-redis-never-knew"
        assert _jobs_queued() == 0
        # ... and a second job, however it came, leaves at once and touches nothing.
        assert jobs.run_job(run.pk) == jobs.WATCHED
        run.refresh_from_db()
        assert (run.state, run.reason, run.log_chunks.count()) == (Run.STARTED, "", 0)
        assert driver.is_running(spec)
    finally:
        holder.kill()
        holder.wait()
    # The holder died: its session, and the lock with it, are gone; the run's job is queued
    # again and reads the launch to its true end.
    _wait(lambda: not watching.watched(run.pk), "the dead job's lock is still held")
    assert reconcile() == [f"run {run.pk}: ranks still running; its output is read again to "
                           "end it truthfully"]  # fmt: skip
    assert _jobs_queued() == 1
    from rq import Queue, SimpleWorker

    from mlbench_master.runs import jobqueue

    queue = Queue("runs", connection=jobqueue.connection())
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    run.refresh_from_db()
    assert run.state == Run.FINISHED, run.reason
    assert "hi" in "".join(run.log_chunks.values_list("text", flat=True))
    assert not watching.watched(run.pk)  # the job let it go as it ended


def _holder_backend(run_id: int) -> int | None:
    """The PostgreSQL backend that holds `run_id`'s watch lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2",
            watching.lock_key(run_id),
        )
        row = cursor.fetchone()
    return row[0] if row else None


@pytest.mark.mpi
def test_a_job_whose_session_was_cut_leaves_the_run_to_the_lock_s_new_holder(
    make_run, redis_settings, transactional_db
):
    """The job's session is cut (as a PostgreSQL restart cuts it) and another job takes the
    lock before it reconnects: it must neither kill the launch nor end the run."""
    run = make_run(state=Run.STARTED, num_workers=1, custom_image_command=SLEEP.format(120))
    driver = _launch(run)
    spec = lifecycle.run_spec(run)
    result: list[str] = []

    def first_job() -> None:
        try:
            result.append(jobs.run_job(run.pk))
        finally:
            connections.close_all()

    watcher = threading.Thread(target=first_job)
    watcher.start()
    took = False
    try:
        _wait(lambda: _holder_backend(run.pk) is not None, "the job took no watch lock")
        for _ in range(20):  # the cut job may reconnect first; then it is cut again
            backend = _holder_backend(run.pk)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(%s, 10000), pg_try_advisory_lock(%s, %s)",
                    [backend, *watching.lock_key(run.pk)],
                )
                took = cursor.fetchone()[1]
            if took:
                break
            time.sleep(0.5)
        assert took, "the test could not take the lock from the cut job"
        watcher.join(60)
        assert not watcher.is_alive(), "the cut job went on watching"
        assert result == [jobs.WATCHED]
        run.refresh_from_db()
        assert (run.state, run.reason) == (Run.STARTED, "")
        assert driver.is_running(spec), "the cut job stopped the launch"
    finally:
        if took:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", watching.lock_key(run.pk))
        driver.cancel(spec)
        watcher.join(60)


def test_the_file_lock_is_held_exactly_as_long_as_its_process_lives(tmp_path):
    """The lock an SQLite master's jobs take: refused while a live process holds it, free
    the moment it dies; reading who holds it takes nothing."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from mlbench_master.runs.watching import FileLock\n"
        "lock = FileLock(Path(sys.argv[1]), 7)\n"
        "print('held' if lock.acquire() else 'refused', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    path = tmp_path / "run-7.lock"
    try:
        assert holder.stdout.readline().strip() == "held"
        assert watching.file_holder_alive(path)
        assert not watching.FileLock(tmp_path, 7).acquire()
        assert watching.file_holder_alive(path)  # asking did not take it
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not watching.file_holder_alive(path)
    mine = watching.FileLock(tmp_path, 7)
    assert mine.acquire()
    assert watching.file_holder_alive(path)
    mine.release()
    assert not watching.file_holder_alive(path)
    # A live process at the recorded pid that started at another time is not the holder.
    me = psutil.Process()
    path.write_text(f"{me.pid} {me.create_time() - 5.0!r}\n")
    assert not watching.file_holder_alive(path)
