"""Launching mpirun detached in pod 0, stopping it (also after a re-attach, also from
another master process), and the pieces: the probe's answer and the launch record."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.kubernetes import detach
from mlbench_master.cluster.kubernetes.execution import Launch
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.emulator import wait_for
from tests.kubernetes.reattach.helpers import (
    alive,
    as_stored,
    die,
    read_to_end,
    read_until,
    restarted_driver,
    stepped_run,
    triples,
)

# ------------------------------------------------------------------------------- launching


def test_the_launch_exec_returns_while_mpirun_runs_on_detached(
    driver, workers, pods_exec, pod_state, gates
):
    execution = driver.launch(
        stepped_run(pods_exec, gates), ["unused"], {"MLBENCH_RUN_TOKEN": "t0k"}
    )
    [(pod, command)] = pods_exec.named(detach.LAUNCH)
    assert pod == f"{STS}-0"
    assert "t0k" not in " ".join(command)  # the token went over stdin
    [(_name, channel)] = [c for c in pods_exec.opened if c[0] == detach.LAUNCH]
    assert channel.done() and channel.status() == (0, "")  # the exec session is over ...
    assert alive(pod_state)  # ... and mpirun's stand-in runs on, in a session of its own
    where = execution.record["kubernetes"]
    assert where["launcher"] == f"{STS}-0" and where["launcher_uid"]
    assert where["dir"].startswith(f"{pod_state}/launches/run-7-")
    files = Path(where["dir"])
    wait_for(lambda: b"step 1 line 1" in (files / "stdout.log").read_bytes(), "the output file")
    assert not (files / "exit_code").exists()

    die(pods_exec)  # every exec session of this master dropped: the run goes on
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    wait_for(lambda: (files / "exit_code").exists(), "the recorded exit code")
    assert (files / "exit_code").read_text() == "0\n"
    assert b"step 3 line 1" in (files / "stdout.log").read_bytes()


def test_the_environment_reaches_the_detached_command(driver, workers, pods_exec):
    run = Run(num_workers=1)
    argv = ["sh", "-c", 'echo "token=$MLBENCH_RUN_TOKEN data=$MLBENCH_DATA_DIR"']
    execution = driver.launch(run, argv, {"MLBENCH_RUN_TOKEN": "s3cret", "MLBENCH_DATA_DIR": "/x"})
    lines = read_to_end(execution)
    assert triples(lines) == [(None, "stdout", "token=s3cret data=/datasets")]
    assert execution.poll() == 0 and execution.exit_known


def test_a_command_the_pod_does_not_have_ends_with_the_shells_code(driver, workers):
    execution = driver.launch(Run(num_workers=1), ["no-such-mpirun", "-n", "1"], {})
    lines = read_to_end(execution)
    assert execution.poll() == 127 and execution.exit_known
    [(rank, stream, text)] = triples(lines)
    assert (rank, stream) == (None, "stderr") and "no-such-mpirun: not found" in text


def test_a_launch_that_cannot_start_fails_with_the_pods_answer(driver, workers, pods_exec):
    pods_exec.answers[detach.LAUNCH] = (127, "setsid (util-linux) is missing from the worker image")
    with pytest.raises(ClusterError, match=f"cannot start mpirun in pod {STS}-0: setsid"):
        driver.launch(Run(num_workers=2), ["true"], {})
    # It may have started all the same: whatever carries its marker is stopped.
    assert [pod for pod, _ in pods_exec.named(detach.STOP)] == [f"{STS}-0"]


# ------------------------------------------------------------------------------- stopping


def test_cancel_after_a_reattach_kills_the_detached_session(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = stepped_run(pods_exec, gates)
    record = as_stored(run, driver.launch(run, ["unused"], {}))
    restarted = restarted_driver(emulator, pods_exec, pod_state)
    execution = restarted.attach(record)
    assert len(read_until(execution, 2)) == 2
    assert alive(pod_state)

    execution.kill()  # what the job does on a cancel: driver.cancel, then the rest is read
    assert not alive(pod_state)
    assert triples(execution.read(0)) == [(0, "stdout", "step 1 without its end, ")]
    assert execution.poll() == 137
    stops = pods_exec.named(detach.STOP)
    assert [pod for pod, _ in stops] == [f"{STS}-0"]
    assert stops[0][1][-1] == record.launch["kubernetes"]["launch_id"]
    # mpirun's daemons and ranks in the other pods are stopped by name, as before.
    assert sum("signal KILL" in " ".join(c) for _, c in pods_exec.calls) == 2


def test_a_cancel_from_another_master_process_stops_the_launch(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = stepped_run(pods_exec, gates)
    execution = driver.launch(run, ["unused"], {})
    assert len(read_until(execution, 2)) == 2
    restarted_driver(emulator, pods_exec, pod_state).cancel(as_stored(run, execution))  # the API's
    assert not alive(pod_state)
    read_to_end(execution)  # the watching job sees the end; no exit code was recorded
    assert execution.poll() == 137 and execution.exit_known is False


def test_is_running_asks_pod_0_about_the_launch(driver, workers, pods_exec, pod_state, gates):
    run = stepped_run(pods_exec, gates)
    record = as_stored(run, driver.launch(run, ["unused"], {}))
    pods_exec.answers["alive >/dev/null"] = (1, "")  # no rank found by name in any pod
    assert driver.is_running(record) is True
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    wait_for(lambda: not alive(pod_state), "the end of the run")
    assert driver.is_running(record) is False


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
