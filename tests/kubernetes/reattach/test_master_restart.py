"""A master restarts mid-run: a new driver given only the stored launch record reads on
where the last checkpoint was, loses no line and stores none twice, and ends the run by
what happened while no master watched (also through the run's job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_master.cluster.base import CannotAttach
from mlbench_master.cluster.kubernetes import detach
from tests.kubernetes.conftest import STS, Run, kill_launches
from tests.kubernetes.emulator import wait_for
from tests.kubernetes.reattach.helpers import (
    EVERY_LINE,
    alive,
    as_stored,
    by_stream,
    die,
    read_to_end,
    read_until,
    restarted_driver,
    saved_offsets,
    stepped_run,
    store_lines,
    triples,
)


def test_a_master_restart_mid_run_loses_no_line_and_stores_none_twice(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = stepped_run(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    stored: list = []
    store_lines(first, read_until(first, 2), stored)  # step 1's whole lines, stored
    wait_for(lambda: saved_offsets(first) != (0, 0), "the offsets saved in the pod")
    (gates / "gate-1").touch()
    unstored = read_until(first, 2)  # step 2, read but not stored: the master dies now
    assert triples(unstored) == EVERY_LINE[2:4]
    record = as_stored(run, first)
    die(pods_exec)

    restarted = restarted_driver(emulator, pods_exec, pod_state)
    second = restarted.attach(record)
    (gates / "gate-2").touch()
    store_lines(second, read_to_end(second), stored)
    # The unfinished line of step 1 whole, nothing twice.
    assert by_stream(stored) == by_stream(EVERY_LINE)
    assert second.poll() == 0 and second.exit_known


def test_each_checkpoint_is_where_a_reattached_reader_starts(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    """Offsets go over the output stream's stdin while it is open, by an exec once it
    ended; both are read back by the next master."""
    run = stepped_run(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    lines = read_to_end(first)
    assert by_stream(triples(lines)) == by_stream(EVERY_LINE)
    assert not [c for c in pods_exec.named(detach.SAVE)]
    first.checkpoint()  # the stream has ended: saved by an exec of its own
    assert len(pods_exec.named(detach.SAVE)) == 1
    again = restarted_driver(emulator, pods_exec, pod_state).attach(as_stored(run, first))
    assert read_to_end(again) == [] and again.poll() == 0


@pytest.mark.parametrize("code", [0, 3])
def test_a_run_that_ended_while_no_master_watched_ends_by_its_recorded_exit_code(
    driver, emulator, workers, pods_exec, pod_state, gates, code
):
    run = stepped_run(pods_exec, gates, code)
    first = driver.launch(run, ["unused"], {})
    stored: list = []
    store_lines(first, read_until(first, 2), stored)
    wait_for(lambda: saved_offsets(first) != (0, 0), "the offsets saved in the pod")
    record = as_stored(run, first)
    die(pods_exec)  # the run goes on and ends while no master is there
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    exit_file = Path(record.launch["kubernetes"]["dir"]) / "exit_code"
    wait_for(exit_file.exists, "the end of the run")
    wait_for(lambda: not alive(pod_state), "the run's processes to end")

    second = restarted_driver(emulator, pods_exec, pod_state).attach(record)
    store_lines(second, read_to_end(second), stored)
    assert by_stream(stored) == by_stream(EVERY_LINE)
    assert second.poll() == code and second.exit_known


def test_a_launch_killed_while_no_master_watched_says_its_exit_code_is_unknown(
    driver, emulator, workers, pods_exec, pod_state, gates
):
    run = stepped_run(pods_exec, gates)
    first = driver.launch(run, ["unused"], {})
    assert by_stream(triples(read_until(first, 2))) == by_stream(EVERY_LINE[:2])
    record = as_stored(run, first)
    die(pods_exec)
    kill_launches(pod_state)  # the OOM killer takes the wrapper too
    wait_for(lambda: not alive(pod_state), "the killed launch")

    second = restarted_driver(emulator, pods_exec, pod_state).attach(record)
    lines = read_to_end(second)
    # Nothing was checkpointed: all it wrote is read again, the unfinished line included.
    assert by_stream(triples(lines)) == by_stream(
        [*EVERY_LINE[:2], (0, "stdout", "step 1 without its end, ")]
    )
    assert second.poll() == 137 and second.exit_known is False


@pytest.mark.parametrize("what", ["deleted", "replaced"])
def test_pods_deleted_while_no_master_watched_cannot_be_reattached(
    driver, emulator, workers, pods_exec, pod_state, gates, what
):
    run = stepped_run(pods_exec, gates)
    record = as_stored(run, driver.launch(run, ["unused"], {}))
    workers.delete_pod(f"{STS}-0")
    if what == "replaced":  # the StatefulSet controller makes a new pod 0 at once
        workers.make_ready(workers.create_pods(STS, count=1))
    restarted = restarted_driver(emulator, pods_exec, pod_state)
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
    record = as_stored(run, driver.launch(run, ["unused"], {}))
    directory = Path(record.launch["kubernetes"]["dir"])
    wait_for(lambda: (directory / "exit_code").exists(), "the end of the launch")
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    with pytest.raises(CannotAttach, match=f"are missing from pod {STS}-0"):
        restarted_driver(emulator, pods_exec, pod_state).attach(record)


def test_pod_0_lost_while_watched_ends_the_run_with_the_reason(
    driver, workers, pods_exec, pod_state, gates
):
    execution = driver.launch(stepped_run(pods_exec, gates), ["unused"], {})
    assert len(read_until(execution, 2)) == 2
    workers.delete_pod(f"{STS}-0")
    for name, channel in pods_exec.opened:
        if name == detach.STREAM:
            channel.close()  # its exec session goes with the pod
    lines = read_to_end(execution)
    assert execution.poll() == 255
    assert triples(lines)[-1] == (
        None,
        "stderr",
        f"kubernetes: pod {STS}-0, where mpirun ran, is gone",
    )


def test_a_dropped_output_stream_is_opened_again_where_it_stopped(
    driver, workers, pods_exec, pod_state, gates
):
    """A proxy in front of the API server may end a long exec session: reading goes on."""
    execution = driver.launch(stepped_run(pods_exec, gates), ["unused"], {})
    lines = read_until(execution, 2)
    [(_name, stream)] = [c for c in pods_exec.opened if c[0] == detach.STREAM]
    stream.close()
    (gates / "gate-1").touch()
    (gates / "gate-2").touch()
    lines += read_to_end(execution)
    assert by_stream(triples(lines)) == by_stream(EVERY_LINE)
    assert execution.poll() == 0
    assert len(pods_exec.named(detach.STREAM)) == 2
    offsets = [int(c[-2]) for _pod, c in pods_exec.named(detach.STREAM)]
    assert offsets[0] == 0 and offsets[1] > 0  # the second started where the first stopped


# ----------------------------------------------------------------------- through the job


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("how", "state"), [("exit 0", "FINISHED"), ("exit 3", "FAILED"), ("killed", "FAILED")]
)
def test_the_job_of_a_restarted_master_ends_the_run_by_what_happened_unwatched(
    driver, workers, pods_exec, pod_state, gates, master, redis_settings, how, state
):
    from mlbench_master.api.models import LogChunk
    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.jobs import UNRECORDED_UNWATCHED, run_job
    from mlbench_master.runs.reconcile import reconcile

    row = RunRow.objects.create(name="re-attached", num_workers=2, max_bandwidth=0)
    spec = lifecycle.run_spec(row)
    code = 3 if how == "exit 3" else 0
    stepped_run(pods_exec, gates, code)
    execution = driver.launch(spec, ["unused"], {})
    assert lifecycle.mark_started(row)
    lifecycle.record_launch(row, execution.record)
    die(pods_exec)  # the master goes away before reading anything
    if how == "killed":
        # Killed only once step 1 is in the launch's files: on a loaded machine the kill
        # could otherwise come before the ranks printed anything (seen: an empty log).
        wait_for(lambda: step_one_written(pod_state), "step 1's lines in the launch's files")
        kill_launches(pod_state)
    else:
        (gates / "gate-1").touch()
        (gates / "gate-2").touch()
    wait_for(lambda: not alive(pod_state), "the end of the run")
    pods_exec.answers["alive >/dev/null"] = (1, "")  # no rank left in any pod

    assert reconcile() == [
        f"run {row.pk}: ranks ended; its output is read again to end it truthfully"
    ]
    assert run_job(row.pk) == state
    row.refresh_from_db()
    text = "".join(c.text for c in LogChunk.objects.filter(run=row).order_by("seq"))
    if how == "killed":
        assert row.reason.startswith(UNRECORDED_UNWATCHED) and row.exit_code is None
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


def step_one_written(pod_state: Path) -> bool:
    """Step 1's three pieces (two stdout, one stderr) are in the launch's files."""
    for launch in (pod_state / "launches").glob("run-*"):
        out, err = launch / "stdout.log", launch / "stderr.log"
        if out.exists() and err.exists():
            if "step 1 without its end, " in out.read_text() and "warning" in err.read_text():
                return True
    return False
