"""What every task's data shares: the real data set agreed by all ranks, or the synthetic
stand-in said loudly; the error that lets `auto` fall back; the lock ranks take turns with.

All ranks must use the same data, so the decision is made together (`agree_on_real_data`):
rank 0 tries first (downloading if needed, while the others wait), then the others load (from
the cache rank 0 filled, or by themselves on another machine), and the outcomes are compared.
With `auto`, if rank 0 cannot have the real set every rank switches to synthetic data, said
loudly (`synthetic_banner`, which every task and implementation prints). Each task's own
choice lives in its folder (mlbench_worker/tasks/<family>/data.py).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mlbench_worker.training.errors import WorkerError

T = TypeVar("T")


def synthetic_banner(say: Callable[[str], None], real_name: str, note: str) -> None:
    """Said where nobody can miss it, so no result is taken for a `real_name` result."""
    banner = "!" * 78
    why = note or "--dataset synthetic was requested."
    say(
        f"{banner}\n!! SYNTHETIC DATA: this run does not train on {real_name} and its results are\n"
        f"!! not {real_name} results. {why}\n{banner}"
    )


class DataUnavailable(WorkerError):
    """The real data set could not be had (no files and no download); `auto` falls back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


def agree_on_real_data(
    comm: object,
    dataset: str,
    attempt: Callable[[bool], tuple[T | None, str | None, bool]],
) -> tuple[T | None, str | None]:
    """Get a real data set on every rank, the same way for every task.

    `attempt(first)` gets the data on this rank: (value, error, whether the error means
    "unavailable" rather than "damaged"). Rank 0 tries first (`first` True: it downloads or
    converts once, for every rank, while the others wait), then the others (from what rank
    0 left, or by themselves on another machine). Returns (value, None) when every rank has
    it; (None, why) when rank 0 found it unavailable and `dataset` is auto, so that every rank
    falls back together; otherwise raises WorkerError naming the first rank that failed.
    """
    outcome: tuple[T | None, str | None, bool] = (None, None, False)
    if comm.rank == 0:
        outcome = attempt(True)
    first_error, unavailable = comm.bcast_object(outcome[1:])  # rank 0's
    if first_error is not None and unavailable and dataset == "auto":
        return None, first_error
    if comm.rank != 0 and first_error is None:
        outcome = attempt(False)
    errors = comm.allgather_object(outcome[1])
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        r, message = failed[0]
        where = f"rank {r}: " if comm.size > 1 else ""
        raise WorkerError(f"{where}{message}", exit_code=1)
    return outcome[0], None


class FolderLock:
    """An exclusive flock on a file: ranks sharing a data folder take turns preparing it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: io.BufferedRandom | None = None

    def __enter__(self) -> FolderLock:
        import fcntl

        self.fh = open(self.path, "a+b")  # noqa: SIM115 - closed in __exit__
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        assert self.fh is not None
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
