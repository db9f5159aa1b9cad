"""Choosing the data set every rank trains on: CIFAR-10, or the synthetic stand-in.

All ranks must use the same data, so the decision is made together: rank 0 tries first
(downloading if needed, while the others wait), then the others load (from the cache rank 0
filled, or by themselves on another machine), and the outcomes are compared. With `auto`,
if rank 0 cannot have CIFAR-10 every rank switches to synthetic data, said loudly
(`synthetic_banner`, which every task and implementation prints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from mlbench_worker.data import cifar10, synthetic
from mlbench_worker.data.cifar10 import Arrays, DataUnavailable
from mlbench_worker.errors import WorkerError

T = TypeVar("T")


def synthetic_banner(say: Callable[[str], None], real_name: str, note: str) -> None:
    """Said where nobody can miss it, so no result is taken for a `real_name` result."""
    banner = "!" * 78
    why = note or "--dataset synthetic was requested."
    say(
        f"{banner}\n!! SYNTHETIC DATA: this run does not train on {real_name} and its results are\n"
        f"!! not {real_name} results. {why}\n{banner}"
    )


@dataclass
class Dataset:
    name: str  # what was actually used: "cifar10" or "synthetic"
    arrays: Arrays
    note: str = ""  # why synthetic was used, when it was a fallback


def _try_cifar10(data_dir: Path, allow_download: bool) -> tuple[Arrays | None, str | None, bool]:
    """(arrays, error message, whether the error means 'unavailable' rather than 'damaged')."""
    try:
        return cifar10.load(data_dir, allow_download=allow_download), None, False
    except DataUnavailable as exc:
        return None, str(exc), True
    except WorkerError as exc:
        return None, str(exc), False


def load_dataset(
    dataset: str,
    data_dir: str | Path,
    seed: int,
    comm: object,
    train_images: int | None = None,
    test_images: int | None = None,
) -> Dataset:
    """The data set for `dataset` (auto | cifar10 | synthetic), agreed by all ranks."""

    def generated(note: str = "") -> Dataset:
        sizes = (train_images or synthetic.TRAIN_SIZE, test_images or synthetic.TEST_SIZE)
        data = Dataset("synthetic", synthetic.generate(seed, *sizes), note)
        return _limit(data, train_images, test_images)

    if dataset == "synthetic":
        return generated()
    arrays, unavailable = agree_on_real_data(
        comm, dataset, lambda _first: _try_cifar10(Path(data_dir), allow_download=True)
    )
    if unavailable is not None:
        return generated(f"CIFAR-10 could not be had: {unavailable}")
    assert arrays is not None
    return _limit(Dataset("cifar10", arrays), train_images, test_images)


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


def _limit(ds: Dataset, train_images: int | None, test_images: int | None) -> Dataset:
    a = ds.arrays
    if train_images:
        a.train_x, a.train_y = a.train_x[:train_images], a.train_y[:train_images]
    if test_images:
        a.test_x, a.test_y = a.test_x[:test_images], a.test_y[:test_images]
    return ds
