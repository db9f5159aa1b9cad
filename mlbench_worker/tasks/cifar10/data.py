"""Which images every rank trains on for task 1a: CIFAR-10, or its synthetic stand-in.

The real set comes from reader.py (download, verify, parse, cache), agreed by every rank
through mlbench_worker.data.agree_on_real_data; with `auto` and no CIFAR-10, the generated set of
synthetic.py, which the run records and shows as synthetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlbench_worker.data import DataUnavailable, agree_on_real_data
from mlbench_worker.tasks.cifar10 import reader, synthetic
from mlbench_worker.tasks.cifar10.reader import Arrays
from mlbench_worker.training.errors import WorkerError


@dataclass
class Dataset:
    name: str  # what was actually used: "cifar10" or "synthetic"
    arrays: Arrays
    note: str = ""  # why synthetic was used, when it was a fallback


def _try_cifar10(data_dir: Path, allow_download: bool) -> tuple[Arrays | None, str | None, bool]:
    """(arrays, error message, whether the error means 'unavailable' rather than 'damaged')."""
    try:
        return reader.load(data_dir, allow_download=allow_download), None, False
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


def _limit(ds: Dataset, train_images: int | None, test_images: int | None) -> Dataset:
    a = ds.arrays
    if train_images:
        a.train_x, a.train_y = a.train_x[:train_images], a.train_y[:train_images]
    if test_images:
        a.test_x, a.test_y = a.test_x[:test_images], a.test_y[:test_images]
    return ds
