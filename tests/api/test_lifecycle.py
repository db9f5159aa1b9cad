"""mlbench_master.runs.lifecycle: the only place Run.state changes; transitions are idempotent."""

import time

import pytest

from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle

pytestmark = pytest.mark.django_db


def test_happy_path(make_run):
    run = make_run(state=Run.INITIALIZED)
    assert lifecycle.active_run() == run
    assert lifecycle.mark_started(run) and run.state == Run.STARTED and run.started_at
    assert not lifecycle.mark_started(run)  # only from INITIALIZED
    assert lifecycle.mark_finished(run, 0) and run.state == Run.FINISHED and run.exit_code == 0
    assert lifecycle.active_run() is None
    # a finished run is never moved back
    assert not lifecycle.mark_failed(run, "late failure")
    assert not lifecycle.cancel_run(run)
    assert run.state == Run.FINISHED


def test_nonzero_exit_is_a_failure(make_run):
    run = make_run(state=Run.STARTED)
    assert lifecycle.mark_finished(run, 137)
    assert run.state == Run.FAILED and run.exit_code == 137 and "137" in run.reason


def test_failed_with_reason(make_run):
    run = make_run(state=Run.STARTED)
    assert lifecycle.mark_failed(run, "time limit of 60 s reached", exit_code=None)
    assert run.reason == "time limit of 60 s reached" and run.finished_at


def test_a_reason_with_nul_characters_is_stored_without_them(make_run):
    """PostgreSQL text holds no NUL; a reason made of output lines can carry one."""
    run = make_run(state=Run.STARTED)
    assert lifecycle.mark_failed(run, "rank 1 exited\n[rank 0] \x00\n", exit_code=137)
    assert Run.objects.get(pk=run.pk).reason == "rank 1 exited\n[rank 0] \n"


def test_cancel_then_late_failure_keeps_cancelled(make_run):
    run = make_run(state=Run.STARTED)
    assert lifecycle.cancel_run(run)
    assert run.state == Run.CANCELLED
    stale = Run.objects.get(pk=run.pk)
    assert not lifecycle.mark_failed(stale, "mpirun killed")
    assert Run.objects.get(pk=run.pk).state == Run.CANCELLED


def test_create_run_conflict_and_light_target(db, redis_settings):
    run = lifecycle.create_run({"name": "a", "num_workers": 1, "light_target": True})
    assert run.target == "light" and run.job_id
    assert lifecycle.run_spec(run).target == "light"
    with pytest.raises(lifecycle.RunConflict, match=f"run {run.pk}"):
        lifecycle.create_run({"name": "b", "num_workers": 1})


# --------------------------------------------------------------------------- the run's job
# These run the real job code with the real local driver (mpirun, 1 rank) and real RQ.

SAY_HI = "python -c \"import time; print('hi', flush=True); time.sleep({})\""


def _launch(run, seconds):
    """Launch `run` with the real local driver as run_job would, its launch record stored."""
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment

    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, execution.record)
    return driver, execution


def test_custom_command_shlex_cannot_split_is_a_400(api):
    response = api.post(
        "/api/runs/",
        {"name": "bad", "num_workers": 1, "custom_image_command": "python -c 'print(1)"},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "custom_image_command" in response.json()["errors"]
    assert "quotation" in str(response.json())


@pytest.mark.mpi
def test_any_error_before_the_watch_fails_the_run_and_is_raised(make_run):
    from mlbench_master.runs import jobs

    # Stored without the API's validation (an older master, the admin): shlex fails in the job.
    run = make_run(state=Run.INITIALIZED, num_workers=1, custom_image_command="echo 'unclosed")
    with pytest.raises(ValueError, match="quotation"):
        jobs.run_job(run.pk)
    run.refresh_from_db()
    assert run.state == Run.FAILED
    assert "ValueError" in run.reason and "quotation" in run.reason
    assert lifecycle.active_run() is None  # the next run is not refused with 409


def test_a_dead_rq_worker_with_a_fresh_heartbeat_is_not_busy(redis_settings):
    import subprocess
    import sys

    from mlbench_master.runs import jobqueue

    # A real RQ worker takes a job, heartbeats, then dies without a word (SIGKILL, OOM).
    code = (
        "import sys, redis\n"
        "from rq import Queue, Worker\n"
        "from rq.executions import prepare_execution\n"
        "conn = redis.Redis.from_url(sys.argv[1])\n"
        "queue = Queue('runs', connection=conn)\n"
        "job = queue.enqueue_call('mlbench_master.runs.jobs.run_job', args=(0,))\n"
        "worker = Worker([queue], connection=conn, name='doomed')\n"
        "worker.register_birth(); worker.heartbeat(); prepare_execution(worker, job)\n"
        "print(job.id)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, redis_settings], capture_output=True, text=True, check=True
    )
    job_id = done.stdout.strip()
    assert job_id not in jobqueue.jobs_in_progress()
    # The same state written by a worker that is alive (this process) counts as busy.
    from rq import Queue, Worker
    from rq.executions import prepare_execution

    queue = Queue("runs", connection=jobqueue.connection())
    job = queue.enqueue_call("mlbench_master.runs.jobs.run_job", args=(0,))
    worker = Worker([queue], connection=queue.connection, name="alive")
    worker.register_birth()
    worker.heartbeat()
    prepare_execution(worker, job)
    assert jobqueue.jobs_in_progress() == {job.id}
    # Its pid now taken by a process born after it registered (a restarted container's new
    # worker is pid 1 again): that is not the worker, whose job is no longer in progress.
    time.sleep(jobqueue.BIRTH_SLACK_SECONDS + 1.5)
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        queue.connection.hset(worker.key, "pid", newcomer.pid)
        assert jobqueue.jobs_in_progress() == set()
    finally:
        newcomer.kill()
        newcomer.wait()


@pytest.mark.mpi
def test_reconcile_reads_an_ended_launch_to_its_true_end(make_run, redis_settings):
    from rq import Queue, SimpleWorker

    from mlbench_master.runs import jobqueue
    from mlbench_master.runs.reconcile import reconcile

    run = make_run(state=Run.STARTED, num_workers=1, custom_image_command=SAY_HI.format(0))
    _driver, execution = _launch(run, 0)
    execution.popen.wait(timeout=60)  # mpirun ended while no job watched it
    notes = reconcile()
    assert notes == [f"run {run.pk}: ranks ended; its output is read again to end it truthfully"]
    queue = Queue("runs", connection=jobqueue.connection())
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    run.refresh_from_db()
    assert run.state == Run.FINISHED and run.exit_code == 0, run.reason
    assert "hi" in "".join(run.log_chunks.values_list("text", flat=True))


@pytest.mark.mpi
def test_reconcile_without_redis_stops_the_ranks_and_fails_the_run(make_run, settings):
    from mlbench_master.runs.reconcile import reconcile
    from tests.services import free_port

    settings.RQ_QUEUES = {"runs": {"URL": f"redis://127.0.0.1:{free_port()}/0"}}
    run = make_run(state=Run.STARTED, num_workers=1, custom_image_command=SAY_HI.format(120))
    driver, _execution = _launch(run, 120)
    assert driver.is_running(lifecycle.run_spec(run))
    notes = reconcile()  # must not raise
    run.refresh_from_db()
    assert run.state == Run.FAILED and "could not enqueue" in run.reason
    assert "ranks stopped" in notes[0]
    assert not driver.is_running(lifecycle.run_spec(run))


def test_collector_reconciles_a_started_run_whose_job_died(make_run, redis_settings):
    from mlbench_master.runs.collector import collector_loop
    from mlbench_master.runs.reconcile import JOB_DIED

    run = make_run(state=Run.STARTED, num_workers=1, job_id="gone-with-its-worker")
    rounds = iter([False, True])
    collector_loop(interval=0, stop=lambda: next(rounds), reconcile_every=0)
    run.refresh_from_db()
    assert run.state == Run.FAILED
    assert run.reason.startswith(JOB_DIED)


def test_manifest_says_whether_the_local_cluster_limits_bandwidth(db, redis_settings, settings):
    from mlbench_master.cluster.local import network

    settings.MLBENCH_LOCAL_NETWORK = "off"
    run = lifecycle.create_run({"name": "bw", "num_workers": 1, "max_bandwidth": 100})
    assert "MLBENCH_LOCAL_NETWORK=off" in run.manifest["not_applied"]["max_bandwidth"]
    del settings.MLBENCH_LOCAL_NETWORK  # the default: auto
    run.delete()
    run = lifecycle.create_run({"name": "bw", "num_workers": 1, "max_bandwidth": 100})
    missing = network.missing_capability()
    assert run.manifest["network"]["max_bandwidth"]["applied"] is (missing is None)
    if missing:
        assert missing in run.manifest["not_applied"]["max_bandwidth"]
    else:
        assert "max_bandwidth" not in run.manifest.get("not_applied", {})
