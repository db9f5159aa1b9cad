"""Re-attach on Kubernetes: mpirun runs detached in pod 0 and outlives the master.

The worker pods are the API emulator's; pod 0's commands (the launch's scripts of
detach.py) really run on this machine, in a directory that stands for the pods' "state"
emptyDir (conftest.py): the stand-in for mpirun really is detached, really writes its
output and exit code to files there, and really outlives the channels and the driver
that started it. A master restart is a new driver given only the stored launch record,
as the job reads it back from the database; the old driver's Execution is dropped.

The stand-in prints in steps, each released by a "gate" file the test creates, so what
was printed when is decided by the test and never by timing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlbench_master.cluster.base import CannotAttach, ClusterError
from mlbench_master.cluster.kubernetes import KubernetesCluster, checkpoints, detach
from mlbench_master.cluster.kubernetes.execution import Launch
from mlbench_master.cluster.kubernetes.names import STATE_DIR
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.conftest import STS, Run, launch_processes
from tests.kubernetes.emulator import Controller, Emulator, wait_for

# Prints "$1" lines of step 1, then waits for gate file "$2" before each next step.
STEPS = r"""
echo "[1,0]<stdout>: step 1 line 1"
echo "[1,1]<stderr>: step 1 warning" >&2
printf '[1,0]<stdout>: step 1 without its end, '
while [ ! -e "$1/gate-1" ]; do sleep 0.05; done
printf 'ended in step 2 (caf\303\251)\n'
echo "[1,0]<stdout>: step 2 line 2"
while [ ! -e "$1/gate-2" ]; do sleep 0.05; done
echo "[1,0]<stdout>: step 3 line 1"
echo "[1,1]<stderr>: step 3 warning" >&2
exit "$2"
"""
EVERY_LINE = [
    (0, "stdout", "step 1 line 1"),
    (1, "stderr", "step 1 warning"),
    (0, "stdout", "step 1 without its end, ended in step 2 (café)"),
    (0, "stdout", "step 2 line 2"),
    (0, "stdout", "step 3 line 1"),
    (1, "stderr", "step 3 warning"),
]


@pytest.fixture
def gates(tmp_path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def workers(controller):
    controller.make_ready(controller.create_pods(STS))
    return controller


def _steps(pods_exec, gates: Path, code: int = 0) -> Run:
    pods_exec.program = ["sh", "-c", STEPS, "fake-mpirun", str(gates), str(code)]
    return Run(num_workers=2)


def _restarted(emulator, pods_exec, pod_state) -> KubernetesCluster:
    """A driver as a restarted master has it: nothing of the old one but the cluster."""
    return KubernetesCluster(
        api_client=emulator.client,
        namespace=NAMESPACE,
        release=RELEASE,
        open_channel=pods_exec,
        state_dir=str(pod_state),
    )


def _stored(run, execution):
    """The run as the job stores it after launch (runs.record_launch) and reads it back."""
    return Run(id=run.id, num_workers=run.num_workers, launch=execution.record)


def _read_until(execution, count: int, limit: float = 10.0) -> list:
    lines: list = []
    deadline = time.monotonic() + limit
    while len(lines) < count:
        assert time.monotonic() < deadline, f"only {lines} came"
        lines += execution.read(0.1)
    return lines


def _read_to_end(execution, limit: float = 15.0) -> list:
    lines: list = []
    deadline = time.monotonic() + limit
    while execution.poll() is None:
        assert time.monotonic() < deadline, f"the launch did not end; read {lines}"
        lines += execution.read(0.1)
    return lines


def _triples(lines) -> list[tuple]:
    return [(line.rank, line.stream, line.text) for line in lines]


def _by_stream(triples) -> dict[str, list[tuple]]:
    """Lines per stream, in order: how stdout and stderr interleave is up to the reader."""
    return {s: [t for t in triples if t[1] == s] for s in ("stdout", "stderr")}


def _store(execution, lines, stored: list) -> None:
    """What the job's log writer does: store the lines, then checkpoint."""
    stored += _triples(lines)
    execution.checkpoint()


def _saved_offsets(execution) -> tuple[int, int]:
    path = Path(execution.launch.directory) / "offsets"
    try:
        out, err = path.read_text().split()
    except (OSError, ValueError):
        return (0, 0)
    return int(out), int(err)


def _die(pods_exec) -> None:
    """The master process goes away: every exec session it had open drops."""
    for _name, channel in pods_exec.opened:
        channel.close()


def _alive(pod_state) -> bool:
    return bool(launch_processes(pod_state))


# ------------------------------------------------------------------------------- launching


def test_the_launch_exec_returns_while_mpirun_runs_on_detached(
    driver, workers, pods_exec, pod_state, gates
):
    execution = driver.launch(_steps(pods_exec, gates), ["unused"], {"MLBENCH_RUN_TOKEN": "t0k"})
    [(pod, command)] = pods_exec.named(detach.LAUNCH)
    assert pod == f"{STS}-0"
    assert "t0k" not in " ".join(command)  # the token went over stdin
    [(_name, channel)] = [c for c in pods_exec.opened if c[0] == detach.LAUNCH]
    assert channel.done() and channel.status() == (0, "")  # the exec session is over ...
    assert _alive(pod_state)  # ... and mpirun's stand-in runs on, in a session of its own
    where = execution.record["kubernetes"]
    assert where["launcher"] == f"{STS}-0" and where["launcher_uid"]
    assert where["dir"].startswith(f"{pod_state}/launches/run-7-")
    files = Path(where["dir"])
    wait_for(lambda: b"step 1 line 1" in (files / "stdout.log").read_bytes(), "the output file")
    assert not (files / "exit_code").exists()

    _die(pods_exec)  # every exec session of this master dropped: the run goes on
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    wait_for(lambda: (files / "exit_code").exists(), "the recorded exit code")
    assert (files / "exit_code").read_text() == "0\n"
    assert b"step 3 line 1" in (files / "stdout.log").read_bytes()


def test_the_environment_reaches_the_detached_command(driver, workers, pods_exec):
    run = Run(num_workers=1)
    argv = ["sh", "-c", 'echo "token=$MLBENCH_RUN_TOKEN data=$MLBENCH_DATA_DIR"']
    execution = driver.launch(run, argv, {"MLBENCH_RUN_TOKEN": "s3cret", "MLBENCH_DATA_DIR": "/x"})
    lines = _read_to_end(execution)
    assert _triples(lines) == [(None, "stdout", "token=s3cret data=/datasets")]
    assert execution.poll() == 0 and execution.exit_known


def test_a_command_the_pod_does_not_have_ends_with_the_shells_code(driver, workers):
    execution = driver.launch(Run(num_workers=1), ["no-such-mpirun", "-n", "1"], {})
    lines = _read_to_end(execution)
    assert execution.poll() == 127 and execution.exit_known
    [(rank, stream, text)] = _triples(lines)
    assert (rank, stream) == (None, "stderr") and "no-such-mpirun: not found" in text


def test_a_launch_that_cannot_start_fails_with_the_pods_answer(driver, workers, pods_exec):
    pods_exec.answers[detach.LAUNCH] = (127, "setsid (util-linux) is missing from the worker image")
    with pytest.raises(ClusterError, match=f"cannot start mpirun in pod {STS}-0: setsid"):
        driver.launch(Run(num_workers=2), ["true"], {})
    # It may have started all the same: whatever carries its marker is stopped.
    assert [pod for pod, _ in pods_exec.named(detach.STOP)] == [f"{STS}-0"]


# -------------------------------------------------------------------- a master restarts


def test_a_master_restart_mid_run_loses_no_line_and_stores_none_twice(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = _steps(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    stored: list = []
    _store(first, _read_until(first, 2), stored)  # step 1's whole lines, stored
    wait_for(lambda: _saved_offsets(first) != (0, 0), "the offsets saved in the pod")
    (gates / "gate-1").touch()
    unstored = _read_until(first, 2)  # step 2, read but not stored: the master dies now
    assert _triples(unstored) == EVERY_LINE[2:4]
    record = _stored(run, first)
    _die(pods_exec)

    restarted = _restarted(emulator, pods_exec, pod_state)
    second = restarted.attach(record)
    (gates / "gate-2").touch()
    _store(second, _read_to_end(second), stored)
    # The unfinished line of step 1 whole, nothing twice.
    assert _by_stream(stored) == _by_stream(EVERY_LINE)
    assert second.poll() == 0 and second.exit_known


def test_each_checkpoint_is_where_a_reattached_reader_starts(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    """Offsets go over the output stream's stdin while it is open, by an exec once it
    ended; both are read back by the next master."""
    run = _steps(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    lines = _read_to_end(first)
    assert _by_stream(_triples(lines)) == _by_stream(EVERY_LINE)
    assert not [c for c in pods_exec.named(detach.SAVE)]
    first.checkpoint()  # the stream has ended: saved by an exec of its own
    assert len(pods_exec.named(detach.SAVE)) == 1
    again = _restarted(emulator, pods_exec, pod_state).attach(_stored(run, first))
    assert _read_to_end(again) == [] and again.poll() == 0


@pytest.mark.parametrize("code", [0, 3])
def test_a_run_that_ended_while_no_master_watched_ends_by_its_recorded_exit_code(
    driver, emulator, workers, pods_exec, pod_state, gates, code
):
    run = _steps(pods_exec, gates, code)
    first = driver.launch(run, ["unused"], {})
    stored: list = []
    _store(first, _read_until(first, 2), stored)
    wait_for(lambda: _saved_offsets(first) != (0, 0), "the offsets saved in the pod")
    record = _stored(run, first)
    _die(pods_exec)  # the run goes on and ends while no master is there
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    exit_file = Path(record.launch["kubernetes"]["dir"]) / "exit_code"
    wait_for(exit_file.exists, "the end of the run")
    wait_for(lambda: not _alive(pod_state), "the run's processes to end")

    second = _restarted(emulator, pods_exec, pod_state).attach(record)
    _store(second, _read_to_end(second), stored)
    assert _by_stream(stored) == _by_stream(EVERY_LINE)
    assert second.poll() == code and second.exit_known


def test_a_launch_killed_while_no_master_watched_says_its_exit_code_is_unknown(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = _steps(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    assert _by_stream(_triples(_read_until(first, 2))) == _by_stream(EVERY_LINE[:2])
    record = _stored(run, first)
    _die(pods_exec)
    for proc in launch_processes(pod_state):  # the OOM killer takes the wrapper too
        proc.kill()
    wait_for(lambda: not _alive(pod_state), "the killed launch")

    second = _restarted(emulator, pods_exec, pod_state).attach(record)
    lines = _read_to_end(second)
    # Nothing was checkpointed: all it wrote is read again, the unfinished line included.
    assert _by_stream(_triples(lines)) == _by_stream(
        [*EVERY_LINE[:2], (0, "stdout", "step 1 without its end, ")]
    )
    assert second.poll() == 137 and second.exit_known is False


@pytest.mark.parametrize("what", ["deleted", "replaced"])
def test_pods_deleted_while_no_master_watched_cannot_be_reattached(
    driver, emulator, workers, pods_exec, pod_state, gates, what
):
    run = _steps(pods_exec, gates)
    record = _stored(run, driver.launch(run, ["unused"], {}))
    workers.delete_pod(f"{STS}-0")
    if what == "replaced":  # the StatefulSet controller makes a new pod 0 at once
        workers.make_ready(workers.create_pods(STS, count=1))
    restarted = _restarted(emulator, pods_exec, pod_state)
    expected = {
        "deleted": f"pod {STS}-0, where mpirun ran, is gone",
        "replaced": f"pod {STS}-0, where mpirun ran, was replaced by a new pod of that name",
    }[what]
    with pytest.raises(CannotAttach) as caught:
        restarted.attach(record)
    assert str(caught.value) == f"{expected}; mpirun's output and exit code were in it"


def test_launch_files_gone_from_the_pod_cannot_be_reattached(
    driver, emulator, workers, pods_exec, pod_state
):
    run = Run(num_workers=2)
    pods_exec.program = ["true"]
    record = _stored(run, driver.launch(run, ["unused"], {}))
    directory = Path(record.launch["kubernetes"]["dir"])
    wait_for(lambda: (directory / "exit_code").exists(), "the end of the launch")
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    with pytest.raises(CannotAttach, match=f"are missing from pod {STS}-0"):
        _restarted(emulator, pods_exec, pod_state).attach(record)


def test_pod_0_lost_while_watched_ends_the_run_with_the_reason(
    driver, workers, pods_exec, pod_state, gates
):
    execution = driver.launch(_steps(pods_exec, gates), ["unused"], {})
    assert len(_read_until(execution, 2)) == 2
    workers.delete_pod(f"{STS}-0")
    for name, channel in pods_exec.opened:
        if name == detach.STREAM:
            channel.close()  # its exec session goes with the pod
    lines = _read_to_end(execution)
    assert execution.poll() == 255
    assert _triples(lines)[-1] == (
        None,
        "stderr",
        f"kubernetes: pod {STS}-0, where mpirun ran, is gone",
    )


def test_a_dropped_output_stream_is_opened_again_where_it_stopped(
    driver, workers, pods_exec, pod_state, gates
):
    """A proxy in front of the API server may end a long exec session: reading goes on."""
    execution = driver.launch(_steps(pods_exec, gates), ["unused"], {})
    lines = _read_until(execution, 2)
    [(_name, stream)] = [c for c in pods_exec.opened if c[0] == detach.STREAM]
    stream.close()
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    lines += _read_to_end(execution)
    assert _by_stream(_triples(lines)) == _by_stream(EVERY_LINE)
    assert execution.poll() == 0
    assert len(pods_exec.named(detach.STREAM)) == 2
    offsets = [int(c[-2]) for _pod, c in pods_exec.named(detach.STREAM)]
    assert offsets[0] == 0 and offsets[1] > 0  # the second started where the first stopped


# ------------------------------------------------------------------------------- stopping


def test_cancel_after_a_reattach_kills_the_detached_session(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = _steps(pods_exec, gates)
    record = _stored(run, driver.launch(run, ["unused"], {}))
    restarted = _restarted(emulator, pods_exec, pod_state)
    execution = restarted.attach(record)
    assert len(_read_until(execution, 2)) == 2
    assert _alive(pod_state)

    execution.kill()  # what the job does on a cancel: driver.cancel, then the rest is read
    assert not _alive(pod_state)
    assert _triples(execution.read(0)) == [(0, "stdout", "step 1 without its end, ")]
    assert execution.poll() == 137
    stops = pods_exec.named(detach.STOP)
    assert [pod for pod, _ in stops] == [f"{STS}-0"]
    assert stops[0][1][-1] == record.launch["kubernetes"]["launch_id"]
    # mpirun's daemons and ranks in the other pods are stopped by name, as before.
    assert sum("signal KILL" in " ".join(c) for _, c in pods_exec.calls) == 2


def test_a_cancel_from_another_master_process_stops_the_launch(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = _steps(pods_exec, gates)
    execution = driver.launch(run, ["unused"], {})
    assert len(_read_until(execution, 2)) == 2
    _restarted(emulator, pods_exec, pod_state).cancel(_stored(run, execution))  # the API's
    assert not _alive(pod_state)
    _read_to_end(execution)  # the watching job sees the end; no exit code was recorded
    assert execution.poll() == 137 and execution.exit_known is False


def test_is_running_asks_pod_0_about_the_launch(driver, workers, pods_exec, pod_state, gates):
    run = _steps(pods_exec, gates)
    record = _stored(run, driver.launch(run, ["unused"], {}))
    pods_exec.answers["alive >/dev/null"] = (1, "")  # no rank found by name in any pod
    assert driver.is_running(record) is True
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    wait_for(lambda: not _alive(pod_state), "the end of the run")
    assert driver.is_running(record) is False


# ----------------------------------------------------------------------- through the job


@pytest.fixture
def master(emulator, pods_exec, pod_state, monkeypatch):
    """Every get_driver() call is a new driver, as each process of a master has its own."""
    from mlbench_master.cluster import drivers

    monkeypatch.setattr(
        drivers, "get_driver", lambda name=None: _restarted(emulator, pods_exec, pod_state)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("how", "state"), [("exit 0", "FINISHED"), ("exit 3", "FAILED"), ("killed", "FAILED")]
)
def test_the_job_of_a_restarted_master_ends_the_run_by_what_happened_unwatched(
    driver, workers, pods_exec, pod_state, gates, master, redis_settings, how, state
):
    from mlbench_master import runs
    from mlbench_master.api.models import LogChunk
    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.jobs import UNRECORDED, run_job
    from mlbench_master.reconcile import reconcile

    row = RunRow.objects.create(name="re-attached", num_workers=2, max_bandwidth=0)
    spec = runs.run_spec(row)
    code = 3 if how == "exit 3" else 0
    _steps(pods_exec, gates, code)
    execution = driver.launch(spec, ["unused"], {})
    assert runs.mark_started(row)
    runs.record_launch(row, execution.record)
    _die(pods_exec)  # the master goes away before reading anything
    if how == "killed":
        for proc in launch_processes(pod_state):
            proc.kill()
    else:
        (gates / "gate-1").touch()
        (gates / "gate-2").touch()
    wait_for(lambda: not _alive(pod_state), "the end of the run")
    pods_exec.answers["alive >/dev/null"] = (1, "")  # no rank left in any pod

    assert reconcile() == [
        f"run {row.pk}: ranks ended; its output is read again to end it truthfully"
    ]
    assert run_job(row.pk) == state
    row.refresh_from_db()
    text = "".join(c.text for c in LogChunk.objects.filter(run=row).order_by("seq"))
    if how == "killed":
        assert row.reason.startswith(UNRECORDED) and row.exit_code is None
        assert sorted(text.splitlines()) == [
            "step 1 line 1",
            "step 1 warning",
            "step 1 without its end, ",
        ]
    else:
        assert row.exit_code == code
        assert sorted(text.splitlines()) == sorted(line for _, _, line in EVERY_LINE)
        if code:
            assert row.reason.startswith("mpirun exited with code 3")


# -------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({}, f"{STATE_DIR}/checkpoints/run-7"),
        (
            {"gcePersistentDisk": {"enabled": True, "pdName": "pd"}},
            "/datasets/checkpoints/run-7",
        ),
        (
            {"gcePersistentDisk": {"enabled": True, "pdName": "pd", "readOnly": True}},
            f"{STATE_DIR}/checkpoints/run-7",
        ),
    ],
    ids=["emptyDir", "persistent-disk", "read-only-disk"],
)
def test_checkpoints_go_to_the_data_sets_disk_only_when_it_is_persistent_and_writable(
    values, where, pods_exec
):
    manifest = find(manifests(values), "StatefulSet", STS)
    assert checkpoints.directory(manifest, 7) == where
    with Emulator() as api:
        Controller(api.client, NAMESPACE).create_statefulset(manifest)
        driver = KubernetesCluster(
            api_client=api.client, namespace=NAMESPACE, release=RELEASE, open_channel=pods_exec
        )
        assert driver.checkpoint_dir(7) == where


def test_deleting_a_run_removes_its_checkpoints_in_pod_0(driver, controller, pods_exec):
    names = controller.create_pods(STS)
    driver.delete_checkpoints(7)  # no pod 0 running: an emptyDir's went with its pod
    assert pods_exec.calls == []
    controller.make_ready(names)
    driver.delete_checkpoints(7)
    [(pod, command)] = pods_exec.calls
    assert pod == f"{STS}-0" and command[-1] == f"{driver.state_dir}/checkpoints/run-7"
    pods_exec.answers["mlbench-remove"] = (1, "rm: cannot remove: Read-only file system")
    with pytest.raises(ClusterError, match="Read-only file system"):
        driver.delete_checkpoints(7)


def test_checkpoints_on_a_disk_no_pod_reaches_are_said_to_stay(pods_exec):
    manifest = find(
        manifests({"gcePersistentDisk": {"enabled": True, "pdName": "pd"}}), "StatefulSet", STS
    )
    with Emulator() as api:
        Controller(api.client, NAMESPACE).create_statefulset(manifest)
        driver = KubernetesCluster(
            api_client=api.client, namespace=NAMESPACE, release=RELEASE, open_channel=pods_exec
        )
        with pytest.raises(ClusterError, match="/datasets/checkpoints/run-7 stays on the"):
            driver.delete_checkpoints(7)


def test_the_chart_mounts_the_state_emptydir_where_the_driver_expects_it(worker_manifest):
    spec = worker_manifest["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == STATE_DIR)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume == {"name": mount["name"], "emptyDir": {}}
    assert not mount.get("readOnly")


# --------------------------------------------------------------------------- the pieces


def test_the_probe_answer_is_read_strictly():
    assert detach.Probe.parse("missing\n") == detach.Probe(found=False)
    assert detach.Probe.parse("running - 10 2\n") == detach.Probe(True, True, None, (10, 2))
    assert detach.Probe.parse("ended 3 0 0\n") == detach.Probe(True, False, 3, (0, 0))
    for answer in ("", "sh: 1: grep: not found", "ended x 0 0", "ended - 1"):
        with pytest.raises(ValueError):
            detach.Probe.parse(answer)


def test_a_launch_record_round_trips_and_old_records_have_none():
    launch = Launch(pod="p-0", pod_uid="u", directory="/d", launch_id="abc")
    assert Launch.from_record({"kubernetes": launch.fields()}) == launch
    assert Launch.from_record({"kubernetes": {"launcher": "p-0", "pods": ["p-0"]}}) is None
    assert Launch.from_record({}) is None
