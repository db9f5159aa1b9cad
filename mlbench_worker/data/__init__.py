"""Choosing the data set every rank trains on: CIFAR-10, or the synthetic stand-in.

All ranks must use the same data, so the decision is made together: rank 0 tries first
(downloading if needed, while the others wait), then the others load (from the cache rank 0
filled, or by themselves on another machine), and the outcomes are compared. With `auto`,
if rank 0 cannot have CIFAR-10 every rank switches to synthetic data, said loudly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlbench_worker.data import cifar10, synthetic
from mlbench_worker.data.cifar10 import Arrays, DataUnavailable
from mlbench_worker.errors import WorkerError


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
    kind: str,
    data_dir: str | Path,
    seed: int,
    comm: object,
    train_images: int | None = None,
    test_images: int | None = None,
) -> Dataset:
    """The data set for `kind` (auto | cifar10 | synthetic), agreed by all ranks."""
    if kind == "synthetic":
        ds = Dataset(
            "synthetic",
            synthetic.generate(
                seed, train_images or synthetic.TRAIN_SIZE, test_images or synthetic.TEST_SIZE
            ),
        )
        return _limit(ds, train_images, test_images)

    rank = comm.rank
    result: tuple[Arrays | None, str | None, bool] = (None, None, False)
    if rank == 0:
        result = _try_cifar10(Path(data_dir), allow_download=True)
    first = comm.bcast_object((result[1], result[2]))  # rank 0's (error, unavailable)
    if first[0] is not None and first[1] and kind == "auto":
        note = f"CIFAR-10 could not be had: {first[0]}"
        return _limit(
            Dataset(
                "synthetic",
                synthetic.generate(
                    seed, train_images or synthetic.TRAIN_SIZE, test_images or synthetic.TEST_SIZE
                ),
                note,
            ),
            train_images,
            test_images,
        )
    if rank != 0 and first[0] is None:
        result = _try_cifar10(Path(data_dir), allow_download=True)
    errors = comm.allgather_object(result[1])
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        r, message = failed[0]
        where = f"rank {r}: " if comm.size > 1 else ""
        raise WorkerError(f"{where}{message}", exit_code=1)
    assert result[0] is not None
    return _limit(Dataset("cifar10", result[0]), train_images, test_images)


def _limit(ds: Dataset, train_images: int | None, test_images: int | None) -> Dataset:
    a = ds.arrays
    if train_images:
        a.train_x, a.train_y = a.train_x[:train_images], a.train_y[:train_images]
    if test_images:
        a.test_x, a.test_y = a.test_x[:test_images], a.test_y[:test_images]
    return ds
