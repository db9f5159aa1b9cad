"""Open MPI's transient launch failure is launched once more, said in the log; nothing else.

The run's job runs for real (`jobs.run_job`, the local driver, real mpirun and ranks, worker
slots in network namespaces where the master may make them). In place of mpirun the driver
finds a stand-in script: it counts its calls and, on the calls a test names, fails as Open
MPI's launcher fails (its words, as this machine's Open MPI printed them, and its exit code
213); on the others it is the real mpirun. The last test makes the real Open MPI fail that
way, so the words the product looks for are the launcher's own.
"""

import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mlbench_master.api.models import Run
from mlbench_master.cluster.base import OutputLine
from mlbench_master.cluster.local import network, slots
from mlbench_master.cluster.local.driver import find_mpirun
from mlbench_master.cluster.mpirun import launcher_argv, parse_line
from mlbench_master.cluster.transient import RELAUNCH_NOTE, LaunchStart, says_listener_failed
from mlbench_master.runs import lifecycle

pytestmark = pytest.mark.mpi

# What Open MPI 5.0.11 wrote to stderr here when its PMIx listener could not open.
LISTENER_WORDS = """\
[vm:02409] Impossible to open the file /tmp/ompi.2409/pmix.vm.tool in write mode
[vm:02409] PMIX ERROR: PMIX_ERR_FILE_OPEN_FAILURE in file /openmpi-5.0.11/3rd-party/openpmix/src/mca/ptl/base/ptl_base_listener.c at line 244
--------------------------------------------------------------------------
The PMIx server's listener thread failed to start. We cannot
continue.
--------------------------------------------------------------------------
"""  # noqa: E501
# Another of its failures before any rank (its out-of-band listener, short of descriptors).
OTHER_WORDS = """\
[vm:02350] PRTE ERROR: Out of resource in file /openmpi-5.0.11/3rd-party/prrte/src/mca/oob/tcp/oob_tcp_listener.c at line 132
"""  # noqa: E501
OPEN_MPI_CODE = 213  # its exit code for both
FAILED_LINE = "The PMIx server's listener thread failed to start. We cannot"
MPIRUN_SAYS = OutputLine(None, "stderr", FAILED_LINE)  # mpirun's own line: no rank

# Each rank says where it runs (its slot's host name when slots are namespaces), then waits.
RANK = (
    "python -c \"import os, socket, sys, time; print('up', os.environ['OMPI_COMM_WORLD_RANK'],"
    ' socket.gethostname(), flush=True); time.sleep(float(sys.argv[1]))" {}'
)


class StandIn:
    """The mpirun the local driver finds during a test."""

    def __init__(self, folder: Path, fail_on: tuple[int, ...], words: str, after_ranks: bool):
        self.calls = folder / "calls"
        self.path = folder / "mpirun"
        (folder / "words").write_text(words)
        real = shlex.quote(find_mpirun())
        # After the ranks: the real mpirun runs (and its ranks speak) before the failure.
        fail = f'{real} "$@"; ' if after_ranks else ""
        self.path.write_text(
            "#!/bin/sh\n"
            f"date +%s.%N >> {shlex.quote(str(self.calls))}\n"
            f"n=$(wc -l < {shlex.quote(str(self.calls))})\n"
            f'case " {" ".join(map(str, fail_on))} " in\n'
            f'  *" $n "*) {fail}cat {shlex.quote(str(folder / "words"))} >&2;'
            f" exit {OPEN_MPI_CODE};;\n"
            "esac\n"
            f'exec {real} "$@"\n'
        )
        self.path.chmod(0o755)

    def times(self) -> list[float]:
        """When each call began (seconds since the epoch)."""
        if not self.calls.exists():
            return []
        return [float(line) for line in self.calls.read_text().split()]


@pytest.fixture
def stand_in(settings, tmp_path, monkeypatch):
    """`stand_in(fail_on=(1,), words=LISTENER_WORDS, after_ranks=False)`: put it in place."""
    import mlbench_master.cluster.local.driver as local

    settings.MLBENCH_LOCAL_WORKERS = 2
    settings.MLBENCH_MASTER_URL = "http://127.0.0.1:9"  # the command posts nothing

    def make(fail_on=(1,), words=LISTENER_WORDS, after_ranks=False) -> StandIn:
        folder = tmp_path / "stand-in"
        folder.mkdir()
        made = StandIn(folder, tuple(fail_on), words, after_ranks)
        monkeypatch.setattr(local, "find_mpirun", lambda: str(made.path))
        return made

    yield make
    slots.close_slots(tmp_path)  # a test that failed early leaves no network behind


def new_run(make_run, seconds=0.0):
    return make_run(
        state=Run.INITIALIZED,
        num_workers=2,
        num_cpus=1,
        custom_image_command=RANK.format(seconds),
        run_all_nodes=True,  # the command on every worker, not only the first
    )


def log_of(run) -> list[tuple[int | None, str, str]]:
    """The run's stored log, one (rank, stream, line) per line, in order."""
    return [
        (chunk.rank, chunk.stream, line)
        for chunk in run.log_chunks.order_by("seq")
        for line in chunk.text.splitlines()
    ]


def notes_in(run) -> list[tuple[int | None, str, str]]:
    return [entry for entry in log_of(run) if entry[2] == RELAUNCH_NOTE]


def assert_nothing_left(run, home):
    from mlbench_master.cluster.drivers import get_driver

    assert not get_driver().is_running(lifecycle.run_spec(run))
    assert slots.read_record(home) is None  # the slots were closed


def test_a_launch_that_failed_so_once_is_launched_again_and_the_run_finishes(
    make_run, stand_in, tmp_path
):
    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1,))
    run = new_run(make_run)
    assert run_job(run.pk) == Run.FINISHED
    run.refresh_from_db()
    assert run.state == Run.FINISHED and run.exit_code == 0, run.reason
    assert len(launcher.times()) == 2
    # The time limit counts from the first start: started_at is not moved by the relaunch.
    assert run.started_at.timestamp() <= launcher.times()[0]
    assert run.job_metadata["launch_attempt"] == 2
    # The log: the launcher's words, then the note (mpirun's kind of line), then the ranks.
    lines = log_of(run)
    words = lines.index((None, "stderr", FAILED_LINE))
    assert notes_in(run) == [(None, "stderr", RELAUNCH_NOTE)]
    note = lines.index((None, "stderr", RELAUNCH_NOTE))
    ranks = [i for i, (rank, _stream, _text) in enumerate(lines) if rank is not None]
    assert words < note < min(ranks)
    hosts = {text.split()[2] for rank, _s, text in lines if rank is not None and text[:3] == "up "}
    assert len(hosts) == (2 if network.missing_capability() is None else 1)  # slots, reopened
    assert_nothing_left(run, tmp_path)


def test_a_launch_that_failed_so_twice_fails_the_run_with_the_launchers_words(
    make_run, stand_in, tmp_path
):
    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1, 2))
    run = new_run(make_run)
    assert run_job(run.pk) == Run.FAILED
    run.refresh_from_db()
    assert run.exit_code == OPEN_MPI_CODE
    assert run.reason.startswith(f"mpirun exited with code {OPEN_MPI_CODE}")
    assert "The PMIx server's listener thread failed to start" in run.reason
    assert RELAUNCH_NOTE not in run.reason
    assert len(launcher.times()) == 2
    assert len(notes_in(run)) == 1
    assert_nothing_left(run, tmp_path)


@pytest.mark.parametrize(
    ("words", "after_ranks", "said"),
    [
        (OTHER_WORDS, False, "PRTE ERROR: Out of resource"),  # another failure, no rank
        (LISTENER_WORDS, True, "listener thread failed to start"),  # after the ranks spoke
    ],
    ids=["another-failure", "after-a-rank-spoke"],
)
def test_any_other_failure_is_not_launched_again(
    make_run, stand_in, tmp_path, words, after_ranks, said
):
    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1,), words=words, after_ranks=after_ranks)
    run = new_run(make_run)
    assert run_job(run.pk) == Run.FAILED
    run.refresh_from_db()
    assert run.exit_code == OPEN_MPI_CODE and said in run.reason, run.reason
    assert len(launcher.times()) == 1
    assert notes_in(run) == [] and "launch_attempt" not in run.job_metadata
    spoke = any(rank is not None for rank, _stream, _text in log_of(run))
    assert spoke is after_ranks
    assert_nothing_left(run, tmp_path)


def test_a_cancel_during_the_second_launch_stops_it(make_run, stand_in, tmp_path, transactional_db):
    from django.db import connection

    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1,))
    run = new_run(make_run, seconds=300)
    result: dict = {}

    def work() -> None:
        try:
            result["state"] = run_job(run.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 120
    while not [e for e in log_of(run) if e[0] is not None]:  # the second launch's ranks
        assert time.monotonic() < deadline and thread.is_alive(), result
        time.sleep(0.2)
    run.refresh_from_db()
    assert run.job_metadata["launch_attempt"] == 2
    # The stored record is the second launch's: what cancel (and re-attach) reach.
    from mlbench_master.cluster.drivers import get_driver

    assert get_driver().is_running(lifecycle.run_spec(run))
    assert "up 0" in (Path(run.job_metadata["local"]["dir"]) / "stdout.log").read_text()
    assert lifecycle.cancel_run(run)  # the API's cancel: state first, then the driver's cancel
    thread.join(60)
    assert not thread.is_alive() and result == {"state": Run.CANCELLED}
    assert len(launcher.times()) == 2
    assert_nothing_left(run, tmp_path)


def _launch_unwatched(run, job_metadata=None):
    """A STARTED run's launch as a job records it before its master dies (no one watches)."""
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment

    lifecycle.mark_started(run)
    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, {**execution.record, **(job_metadata or {})})
    execution.popen.wait(timeout=60)  # it failed while no job watched it


def test_a_reattached_first_launch_that_failed_so_is_launched_again(make_run, stand_in):
    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1,))
    run = new_run(make_run)
    _launch_unwatched(run)
    assert run_job(run.pk) == Run.FINISHED  # the job a restarted master enqueues
    run.refresh_from_db()
    assert len(launcher.times()) == 2 and len(notes_in(run)) == 1


def test_a_reattached_second_launch_that_failed_so_is_not_launched_a_third_time(make_run, stand_in):
    from mlbench_master.runs.jobs import run_job

    launcher = stand_in(fail_on=(1,))
    run = new_run(make_run)
    _launch_unwatched(run, {"launch_attempt": 2})  # as the job records a launch again
    assert run_job(run.pk) == Run.FAILED
    run.refresh_from_db()
    assert "listener thread failed to start" in run.reason
    assert len(launcher.times()) == 1 and notes_in(run) == []


@pytest.mark.parametrize(
    ("lines", "code", "transient"),
    [
        ([MPIRUN_SAYS], 213, True),
        ([MPIRUN_SAYS], 0, False),
        ([OutputLine(0, "stdout", "up"), MPIRUN_SAYS], 213, False),
        ([OutputLine(0, "stderr", FAILED_LINE)], 213, False),
        ([OutputLine(None, "stderr", "PRTE ERROR: Out of resource")], 213, False),
    ],
    ids=["its-words", "exit-0", "after-a-rank", "a-rank-says-it", "other-words"],
)
def test_the_rule_reads_mpiruns_own_lines_and_the_ranks(lines, code, transient):
    start = LaunchStart()
    start.add(lines)
    assert start.failed_transiently(code) is transient


def test_the_words_are_open_mpis_own():
    """The real launcher made to fail that way: too few file descriptors for the file its
    PMIx listener writes. The limit that does it depends on Open MPI's build, so limits are
    tried upwards until the launcher starts its rank."""
    argv = [*launcher_argv(1, mpirun=find_mpirun(), forward=()), "true"]
    seen = []
    for limit in range(8, 64):
        done = subprocess.run(
            ["sh", "-c", f'ulimit -n {limit} && exec "$@"', "sh", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [parse_line(text, "stderr") for text in done.stderr.splitlines()]
        lines += [parse_line(text, "stdout") for text in done.stdout.splitlines()]
        start = LaunchStart()
        start.add(lines)
        if start.failed_transiently(done.returncode):
            assert says_listener_failed(done.stderr)
            return
        if done.returncode == 0:
            break
        seen.append(f"ulimit -n {limit}: code {done.returncode}: {done.stderr[-300:]}")
    pytest.fail("Open MPI never failed to open its PMIx listener:\n" + "\n".join(seen))
