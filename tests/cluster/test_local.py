"""The local cluster driver with a real mpirun and 2 ranks (no master, no database)."""

import dataclasses
import socket
import subprocess
import sys
import time

import psutil
import pytest

from mlbench_master.cluster.base import CannotAttach, ClusterError, RunSpec
from mlbench_master.cluster.failures import failure_reason
from mlbench_master.cluster.local import LocalCluster, launch_processes, network, slots
from tests.cluster.local_launch import launch, read_until_exit, run_to_exit

pytestmark = pytest.mark.mpi

SLEEPER = (
    'python -c \'import os, sys, time; r = os.environ["OMPI_COMM_WORLD_RANK"]; '
    'print("up", r, os.environ["MLBENCH_RUN_TOKEN"], os.environ["OMP_NUM_THREADS"], '
    'flush=True); print("warn", r, file=sys.stderr, flush=True); '
    "time.sleep(float(sys.argv[1]))'"
)


@pytest.fixture
def driver(tmp_path, monkeypatch):
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path))
    monkeypatch.setenv("MLBENCH_LOCAL_WORKERS", "2")
    from django.conf import settings

    monkeypatch.setattr(settings, "MLBENCH_HOME", tmp_path, raising=False)
    monkeypatch.setattr(settings, "MLBENCH_LOCAL_WORKERS", 2, raising=False)
    monkeypatch.setattr(settings, "MLBENCH_DATA_DIR", tmp_path / "data", raising=False)
    yield LocalCluster()
    # A test that stops before its launch ends leaves the slots' network: remove it.
    slots.close_slots(tmp_path)


def make_run(run_id, seconds, workers=2):
    return RunSpec(
        id=run_id,
        num_workers=workers,
        num_cpus=1.0,
        max_bandwidth=1000,
        custom_image_command=f"{SLEEPER} {seconds}",
        run_all_nodes=True,
    )


def stored(run, execution):
    """`run` as the job stores it after the launch: with the launch's record."""
    return dataclasses.replace(run, launch=dict(execution.record))


def wait_ranks(driver, run, count=2):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = [p for p in driver.pods() if p.phase == "Running"]
        if len(busy) >= count:
            return busy
        time.sleep(0.1)
    raise AssertionError("ranks did not start")


def test_checkpoints_live_under_mlbench_home_and_go_with_delete(driver, tmp_path):
    folder = driver.checkpoint_dir(12)
    assert folder == str(tmp_path / "checkpoints" / "run-12")
    assert driver.checkpoint_dir(13) != folder  # one folder per run
    (tmp_path / "checkpoints" / "run-12").mkdir(parents=True)
    (tmp_path / "checkpoints" / "run-12" / "checkpoint.pt").write_bytes(b"x")
    (tmp_path / "checkpoints" / "run-13").mkdir()
    driver.delete_checkpoints(12)
    assert not (tmp_path / "checkpoints" / "run-12").exists()
    assert (tmp_path / "checkpoints" / "run-13").is_dir()  # only that run's
    driver.delete_checkpoints(99)  # none there: nothing to do, no error


def test_slots_are_pods_and_too_many_workers_is_refused(driver):
    pods = driver.pods()
    assert [p.name for p in pods] == ["local-worker-0", "local-worker-1"]
    assert {p.phase for p in pods} == {"Idle"}
    assert pods[0].labels["component"] == "worker"
    with pytest.raises(ClusterError, match="has 2 local worker slots"):
        driver.prepare(make_run(1, 0, workers=3))


def test_launch_streams_attributed_output_and_exit_code(driver):
    run = make_run(11, 0.5)
    executions = []

    def start():
        executions.append(launch(driver, run))
        return executions[-1]

    code, lines = run_to_exit(start)
    assert code == 0
    execution = executions[-1]  # the launch that ran (a transient failure is relaunched)
    stdout = {(line.rank, line.text) for line in lines if line.stream == "stdout"}
    assert (0, "up 0 tok-123 1") in stdout and (1, "up 1 tok-123 1") in stdout
    assert {(line.rank, line.stream) for line in lines if "warn" in line.text} == {
        (0, "stderr"),
        (1, "stderr"),
    }
    assert execution.record["local"]["sid"] > 0
    # Both slots are on this machine: one node to price (results/cost.py).
    host = socket.gethostname()
    assert execution.record["nodes"] == [
        {"name": host, "kinds": [host, "local"], "workers": 2, "capacity": ""}
    ]
    # Slots as hosts are the default where the master may make them (test_slots.py).
    note = execution.record["max_bandwidth"]
    assert note["requested_mbit_s"] == 1000
    assert note["applied"] is (network.missing_capability() is None), note
    assert not driver.is_running(stored(run, execution))


def test_cancel_from_another_object_kills_every_process(driver):
    run = make_run(12, 120)
    execution = launch(driver, run)
    run = stored(run, execution)
    busy = wait_ranks(driver, run)
    assert {p.name for p in busy} == {"local-worker-0", "local-worker-1"}
    assert driver.is_running(run)
    samples = driver.samples(None)  # the ranks' own markers name their run
    names = {(s.pod_name, s.name) for s in samples}
    assert ("local-worker-1", "memory_bytes") in names and ("local-worker-0", "cpu_cores") in names
    assert all(s.metadata["run_id"] == 12 for s in samples)
    # As the API process would: a fresh driver and the run as stored (its launch record).
    LocalCluster().cancel(RunSpec(id=12, launch=dict(run.launch)))
    assert not driver.is_running(run)
    alive = [p for p in launch_processes(driver.home, run_id=12) if p.status() != "zombie"]
    assert alive == []
    code, _ = read_until_exit(execution, timeout=15)
    assert code != 0


def test_a_new_master_reattaches_and_reads_only_what_is_new(driver):
    run = make_run(13, 2)
    first = launch(driver, run)
    seen = []
    deadline = time.monotonic() + 60
    while len([line for line in seen if line.stream == "stdout"]) < 2:
        assert time.monotonic() < deadline, f"the ranks did not start: {seen}"
        seen += first.read(0.2)
    first.checkpoint()  # what the job does once these lines are stored
    # The reader goes away (as a killed RQ job would); the ranks go on.
    again = driver.attach(RunSpec(id=13, launch=dict(first.record)))
    code, rest = read_until_exit(again)
    first.popen.wait()
    assert code == 0 and again.exit_known  # the wrapper recorded mpirun's exit code
    assert not any(line.text.startswith("up ") for line in rest if line.stream == "stdout")


def test_killed_rank_is_reported_with_its_signal(driver):
    run = make_run(14, 60)
    execution = launch(driver, run)
    wait_ranks(driver, run)
    rank1 = next(
        p
        for p in launch_processes(driver.home, run_id=14)
        if p.environ().get("OMPI_COMM_WORLD_RANK") == "1" and "python" in p.name()
    )
    rank1.kill()
    code, lines = read_until_exit(execution, timeout=30)
    assert code == 137
    report = [line.text for line in lines if line.rank is None]
    reason = failure_reason(code, report, ["[rank 0] warn 0"])
    assert reason.startswith("rank 1 exited with code 137 (killed: out of memory?)")
    assert reason.endswith("[rank 0] warn 0")
    # The watchers wrote their ends to the launch's folder too (read if the stream lost one).
    recorded = execution.recorded_rank_ends()
    assert any(line.startswith("1 mlbench rank end: code=137 ") for line in recorded.splitlines())
    execution.kill()
    assert not any(p.status() != psutil.STATUS_ZOMBIE for p in launch_processes(driver.home, 14))


def test_failure_reasons_read_mpiruns_report():
    report = [
        "prterun detected that one or more processes exited with non-zero status,",
        "   Process name: [prterun-vm-6057@1,1]",
        "   Exit code:    3",
    ]
    assert failure_reason(3, report, []).startswith("rank 1 exited with code 3")
    assert failure_reason(143, [], []) == "mpirun exited with code 143 (terminated)"
    assert failure_reason(2, [], ["x"]) == "mpirun exited with code 2; last lines of stderr:\nx"


@pytest.mark.parametrize(
    "launcher, srun_says, reason",
    [
        ("srun", ["srun: error: n2: task 1: Exited with exit code 3"], "rank 1 exited with code 3"),
        ("srun", ["srun: error: n1: task 0: Killed"],
         "rank 0 exited with code 137 (killed: out of memory?)"),
        ("srun", ["srun: error: n1: tasks 0-1: Exited with exit code 2"], "rank 0 exited with code 2"),
        ("srun", ["srun: error: n2: task 1: Segmentation fault (core dumped)"],
         "rank 1 exited with code 139 (segmentation fault)"),
        ("srun", ["srun: Job step aborted: Waiting up to 32 seconds"],
         "srun exited with code 143 (terminated)"),
        # mpirun on Slurm starts its daemons with srun: their task numbers are not ranks.
        ("mpirun", ["prterun noticed that process rank 3 with PID 1 on node n2 exited on signal 9 (Killed).",
          "srun: error: n2: task 1: Exited with exit code 1"],
         "rank 3 exited with code 137 (killed: out of memory?)"),
        ("mpirun", ["srun: error: n2: task 1: Exited with exit code 1", "prterun: daemon lost"],
         "mpirun exited with code 143 (terminated)"),
        # mpirun itself killed on Slurm: its daemons' srun warns of CPU binding; still mpirun
        # (the chaos series found "srun exited with code 137" here, guessed from the words).
        ("mpirun", ["srun: warning: can't honor --ntasks-per-node set to 1 which doesn't match "
                    "the requested tasks 2 with the number of requested nodes 2."],
         "mpirun exited with code 143 (terminated)"),
    ],
)  # fmt: skip
def test_failure_reasons_read_sruns_report(launcher, srun_says, reason):
    assert failure_reason(143, srun_says, [], launcher=launcher) == reason


def test_no_mpirun_is_a_clear_error(driver, monkeypatch):
    import mlbench_master.cluster.local.driver as local

    monkeypatch.setattr(local, "venv_bin", lambda: driver.home)
    monkeypatch.setenv("PATH", str(driver.home))
    with pytest.raises(ClusterError, match="mpirun not found"):
        local.find_mpirun()


def test_a_reattached_launch_killed_unwatched_has_no_exit_code(driver):
    run = make_run(15, 120)
    first = launch(driver, run)
    wait_ranks(driver, run)
    as_stored = RunSpec(id=15, launch=dict(first.record))
    driver.cancel(as_stored)  # kills the wrapper too: it never writes mpirun's exit code
    first.popen.wait(timeout=10)
    again = driver.attach(as_stored)
    code, _ = read_until_exit(again, timeout=15)
    assert not again.exit_known and code == 137


def test_attach_without_a_recorded_launch_says_why(driver):
    with pytest.raises(CannotAttach, match="no launch of it is recorded"):
        driver.attach(RunSpec(id=17))
    gone = {"local": {"dir": str(driver.home / "no-such-launch")}}  # its files were removed
    with pytest.raises(CannotAttach, match="no launch of it is recorded"):
        driver.attach(RunSpec(id=17, launch=gone))


def test_a_reused_session_id_never_matches_an_unrelated_process(driver):
    # An unrelated program that leads the session a finished launch had recorded.
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        info = {"sid": stranger.pid, "create_time": 0.0}  # the old leader's start time
        run = RunSpec(id=16, launch={"local": info})
        assert not driver.is_running(run)
        driver.cancel(run)
        assert stranger.poll() is None, "cancel killed a process that is not ours"
        # Even with the leader's real create time, a process without our marker is not ours.
        info["create_time"] = psutil.Process(stranger.pid).create_time()
        assert launch_processes(driver.home, 16, stranger.pid, info["create_time"]) == []
    finally:
        stranger.kill()
        stranger.wait()
