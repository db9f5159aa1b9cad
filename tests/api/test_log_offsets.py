"""Each line of a run's output is stored once, however often it is read.

A launch's reader saves where to read on (`Execution.checkpoint`) only after the database
stored what it read, a step of its own. Seen in tests/e2e/test_faults.py under load ("log
lines stored twice"): Redis went away while RQ's worker beat its heart, the worker quit,
its work horse went on watching the run, and the job reconciliation enqueued for the run
re-attached beside it: two readers of one launch. A job killed between its write and its
checkpoint leaves the next reader to read that write again too. Both are played here with
the local driver and real mpirun; the store's rule itself (runs/logs.py) is checked first,
on lines whose offsets the tests give.
"""

import time

import pytest

from mlbench_master.api.models import LogChunk, Run
from mlbench_master.cluster.base import OutputLine
from mlbench_master.cluster.drivers import get_driver
from mlbench_master.cluster.local import slots
from mlbench_master.cluster.mpirun import driver_argv, rank_environment
from mlbench_master.runs import lifecycle
from mlbench_master.runs.logs import append_logs, append_output
from mlbench_master.runs.logwriter import LogWriter

pytestmark = pytest.mark.django_db

LINES = 60
# Each rank says `line K`, one every 0.05 s.
COUNTER = (
    "python -c \"import time; [(print('line', k, flush=True), time.sleep(0.05))"
    f' for k in range({LINES})]"'
)


def numbered(texts: list[str], start: int = 0, stream: str = "stdout") -> list[OutputLine]:
    """Lines as a reader of a file hands them out: each with where it ends in the file."""
    lines, end = [], start
    for text in texts:
        end += len(text.encode()) + 1
        lines.append(OutputLine(0, stream, text, end=end))
    return lines


def stored_lines(run_id: int) -> list[str]:
    return [
        line
        for text in LogChunk.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("text", flat=True)
        for line in text.splitlines()
    ]


# -- the store's rule ---------------------------------------------------------------------


def test_a_stretch_read_again_with_other_boundaries_is_stored_once(run):
    texts = [f"step {k}" for k in range(10)]
    every = numbered(texts)
    append_output(run, every[:4], "run-1-a")
    # A second reader from an older offset, reading further in one go: lines 2-7 ...
    append_output(run, every[2:8], "run-1-a")
    # ... and the first reader goes on with what it read meanwhile.
    append_output(run, every[4:6], "run-1-a")
    append_output(run, every[6:], "run-1-a")
    assert stored_lines(run.pk) == texts
    # The other stream of the launch counts its own bytes.
    errors = numbered(["warn 0", "warn 1"], stream="stderr")
    append_output(run, errors, "run-1-a")
    append_output(run, errors, "run-1-a")
    assert stored_lines(run.pk) == [*texts, "warn 0", "warn 1"]


def test_another_launch_of_the_run_counts_from_its_own_start(run):
    append_output(run, numbered(["first launch 0", "first launch 1"]), "run-1-a")
    append_output(run, numbered(["relaunched 0"]), "run-1-b")  # its file begins at 0
    append_logs(run, [(None, "stderr", "a note of the master\n")])  # position-less
    append_output(run, numbered(["relaunched 0", "relaunched 1"]), "run-1-b")
    assert stored_lines(run.pk) == [
        "first launch 0",
        "first launch 1",
        "relaunched 0",
        "a note of the master",
        "relaunched 1",
    ]


def test_lines_without_a_position_are_stored_as_they_come(run):
    note = [OutputLine(None, "stderr", "kubernetes: pod 0 lost")]
    append_output(run, note, "run-1-a")
    append_output(run, note, None)
    assert stored_lines(run.pk) == ["kubernetes: pod 0 lost"] * 2


def test_the_bound_keeps_how_far_the_output_is_stored(run, settings):
    settings.MLBENCH_LOG_MAX_BYTES = 50
    every = numbered([f"a line of output number {k:02d}" for k in range(4)])  # 27 bytes each
    append_output(run, every[:1], "run-1-a")
    append_output(run, every[1:], "run-1-a")  # one chunk over the bound: all else dropped
    kept = list(LogChunk.objects.filter(run=run).values_list("seq", flat=True))
    assert kept == [2]  # the newest chunk stays, though over the bound alone
    append_output(run, every, "run-1-a")  # read again after the bound dropped the first
    assert stored_lines(run.pk) == [line.text for line in every[1:]]
    assert Run.objects.get(pk=run.pk).log_bytes == 3 * 27


# -- with real launches -------------------------------------------------------------------


@pytest.fixture
def launched(make_run, settings, tmp_path):
    """A STARTED run with its launch recorded (as its job records it) and the launch."""
    settings.MLBENCH_LOCAL_WORKERS = 2
    run = make_run(
        state=Run.INITIALIZED,
        num_workers=2,
        num_cpus=1,
        custom_image_command=COUNTER,
        run_all_nodes=True,
    )
    lifecycle.mark_started(run)
    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, execution.record)
    yield run, execution
    execution.kill()
    slots.close_slots(tmp_path)


def read_some(execution, output, at_least: int) -> int:
    """Read into `output` until `at_least` counted lines came; how many came."""
    count, deadline = 0, time.monotonic() + 120
    while count < at_least:
        assert time.monotonic() < deadline, "the ranks said too little"
        lines = execution.read(0.2)
        output.add(lines)
        count += sum(line.text.startswith("line ") for line in lines)
    return count


def assert_each_line_once(run) -> None:
    said = [(chunk.rank, line) for chunk in run.log_chunks.order_by("seq")
            for line in chunk.text.splitlines() if line.startswith("line ")]  # fmt: skip
    for rank in (0, 1):
        mine = [line for r, line in said if r == rank]
        assert mine == [f"line {k}" for k in range(LINES)], f"rank {rank} stored {mine}"


@pytest.mark.mpi
def test_a_reader_whose_checkpoint_never_came_stores_nothing_twice(launched):
    from mlbench_master.runs.jobs import Output, run_job

    run, execution = launched
    first = Output(run.pk, execution)
    read_some(execution, first, 2)
    first.flush()  # stored, and the reader's offsets saved
    # It reads on and stores, then dies before it saves its offsets (the job killed
    # between the database's commit and `on_stored`).
    dying = LogWriter(run.pk, source=execution.source)
    read_some(execution, dying, 2)
    assert dying.flush()
    # The job a restarted master enqueues re-attaches and reads on from the saved offsets.
    assert run_job(run.pk) == Run.FINISHED
    assert_each_line_once(run)


@pytest.mark.mpi
def test_two_jobs_reading_one_launch_store_each_line_once(launched):
    from mlbench_master.runs.jobs import Output

    run, execution = launched
    first = Output(run.pk, execution)
    read_some(execution, first, 2)
    first.flush()
    # The job reconciliation enqueued re-attaches while the first (its RQ worker gone, its
    # work horse alive) goes on reading.
    again = get_driver().attach(lifecycle.run_spec(run))
    second = Output(run.pk, again, reattached=True)
    readers = [(execution, first), (again, second)]
    deadline = time.monotonic() + 120
    while any(reader.poll() is None for reader, _ in readers):
        assert time.monotonic() < deadline, "mpirun did not end"
        for reader, output in readers:
            output.add(reader.read(0.1))
            output.flush()
    assert_each_line_once(run)
