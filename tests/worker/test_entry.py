"""training/entry.py: how every rank ends, whatever implementation or task it ran."""

from __future__ import annotations

import pytest

from mlbench_worker.training import entry
from mlbench_worker.training.errors import WorkerError


@pytest.fixture
def slept(monkeypatch):
    """The waits of entry.py, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(entry.time, "sleep", waits.append)
    return waits


def _refuse(world: entry.World) -> int:
    raise WorkerError("--amp: not here", exit_code=2)


@pytest.mark.parametrize("rank", ["0", "1"])
def test_before_its_world_is_known_rank_0_says_it_and_the_others_wait(
    monkeypatch, capsys, slept, rank
):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", rank)
    cleaned = []
    assert entry.run_rank(_refuse, cleanup=lambda: cleaned.append(True)) == 2
    said = capsys.readouterr().err
    if rank == "0":
        assert said == "mlbench-worker: error: --amp: not here\n" and slept == []
    else:
        # mpirun ends the job when the first rank exits: rank 1 leaves rank 0 time to say it.
        assert said == "" and slept == [entry.ERROR_GRACE]
    assert cleaned == [True]


def test_once_the_world_is_known_its_rank_decides_and_nobody_waits(monkeypatch, capsys, slept):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")  # announced 1, the world says 0

    def body(world: entry.World) -> int:
        world.known(0, 2, lambda code: None)
        raise WorkerError("no checkpoint in /x", exit_code=1)

    assert entry.run_rank(body) == 1
    assert capsys.readouterr().err == "mlbench-worker: error: no checkpoint in /x\n"
    assert slept == []


@pytest.mark.parametrize(("size", "aborted"), [(2, [1]), (1, [])])
def test_a_bug_prints_its_traceback_and_aborts_a_job_of_several_ranks(capsys, size, aborted):
    ended: list[int] = []

    def body(world: entry.World) -> int:
        world.known(1, size, ended.append)
        raise ZeroDivisionError("a bug")

    assert entry.run_rank(body) == 1
    assert "Traceback" in capsys.readouterr().err and ended == aborted
