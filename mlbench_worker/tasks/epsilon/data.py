"""Each rank's rows for task 2: epsilon from its cache, or the synthetic stand-in.

Partitioning: with K workers, all ranks draw the same random permutation of the training
rows once (seeded by --seed) and rank r keeps positions r, r+K, r+2K, ...: the shards are
disjoint, cover the set except for fewer than K rows, and are of equal size, so every rank
takes the same number of steps. Every epoch each rank visits its own rows in a new random
order. The shards themselves stay fixed for the run, as in the original mlbench
(partition_dataset_by_rank, then a shuffling loader per rank): a rank then holds only its
shard in memory, read once, instead of re-reading a different part of the 3.2 GB training
set every epoch. Synchronous SGD averages one batch from every shard per step, so each step
still sees a uniform sample of the whole set. The test set is divided the same way without
shuffling (rank r takes rows r, r+K, ...) and evaluation sums over ranks.

The choice between epsilon and synthetic is made together, as for CIFAR-10 (mlbench_worker.data.agree_on_real_data):
rank 0 tries first (downloading and converting if needed), the others then use its cache or
prepare their own copy on another machine, and with `auto` all ranks fall back to synthetic
data, said loudly, when rank 0 cannot have epsilon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlbench_worker.data import DataUnavailable, agree_on_real_data
from mlbench_worker.tasks.epsilon import reader, synthetic
from mlbench_worker.tasks.epsilon.shards import (  # noqa: F401 - re-exported: their old home
    epoch_order,
    partition,
    test_indices,
)
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.errors import WorkerError


class Rows:
    """One rank's rows on its device: batches gathered by index for training, contiguous
    slices for evaluation. Features float32 (rows x features), labels -1/+1 float32."""

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        batch_size: int,
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.device)
        self.y = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(self.device)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return self.x.shape[0]

    @property
    def nbytes(self) -> int:
        return self.x.numel() * 4 + self.y.numel() * 4

    def steps(self, count: int) -> int:
        """Number of batches for `count` indices (the last one may be smaller)."""
        return -(-count // self.batch_size)

    def iterate(
        self, indices: np.ndarray, generator: torch.Generator | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches over `indices` in their order (`generator` is unused: no augmentation)."""
        idx = torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64)).to(self.device)
        for start in range(0, len(idx), self.batch_size):
            part = idx[start : start + self.batch_size]
            yield self.x.index_select(0, part), self.y.index_select(0, part)

    def slices(self, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """All rows in file order, `size` at a time, without copying."""
        for start in range(0, len(self), size):
            yield self.x[start : start + size], self.y[start : start + size]


@dataclass
class LinearData:
    name: str  # what was actually used: "epsilon" or "synthetic"
    train: Rows  # this rank's shard
    test: Rows  # this rank's part of the test set
    train_total: int  # rows of the training set that were split among the ranks
    test_total: int
    features: int
    note: str = ""  # why synthetic was used, when it was a fallback


def load(
    dataset: str,
    data_dir: str | Path,
    seed: int,
    comm: Communicator,
    *,
    features: int,
    batch_size: int,
    device: torch.device,
    synthetic_rows: tuple[int, int],
    train_rows: int | None = None,
    test_rows: int | None = None,
    eval_batch: int = 4096,
    say: Callable[[str], None] = print,
) -> LinearData:
    """The data for `dataset` (auto | epsilon | synthetic), agreed by all ranks; each rank gets
    only its own rows. `train_rows` / `test_rows` keep the first N rows of either split."""

    def build(
        name: str, train: tuple, test: tuple, n_train: int, n_test: int, note: str = ""
    ) -> LinearData:
        return LinearData(
            name,
            Rows(*train, batch_size, device),
            Rows(*test, eval_batch, device),
            n_train,
            n_test,
            features,
            note,
        )

    def generated(note: str = "") -> LinearData:
        n_train = train_rows or synthetic_rows[0]
        n_test = test_rows or synthetic_rows[1]
        _enough_rows(n_train, comm.size)
        train = synthetic.rows(
            seed, "train", n_train, partition(n_train, comm.rank, comm.size, seed), features
        )
        test = synthetic.rows(
            seed, "test", n_test, test_indices(n_test, comm.rank, comm.size), features
        )
        return build("synthetic", train, test, n_train, n_test, note)

    if dataset == "synthetic":
        return generated()

    data_dir = Path(data_dir)

    def attempt(first: bool) -> tuple[None, str | None, bool]:
        return (None, *_try_prepare(data_dir, features, say if first else lambda _msg: None))

    _, unavailable = agree_on_real_data(comm, dataset, attempt)
    if unavailable is not None:
        return generated(f"epsilon could not be had: {unavailable}")

    infos = {split: reader.read_info(data_dir, split) for split in reader.SPLITS}
    sizes = (infos[reader.TRAIN].rows, infos[reader.TEST].rows)
    seen = comm.allgather_object(sizes)
    if len(set(seen)) > 1:
        raise WorkerError(
            f"the ranks see different epsilon files (train/test rows per rank: {seen}); "
            "give every machine the same files",
            exit_code=1,
        )
    n_train = min(sizes[0], train_rows or sizes[0])
    n_test = min(sizes[1], test_rows or sizes[1])
    _enough_rows(n_train, comm.size)
    train = reader.read_rows(data_dir, reader.TRAIN, partition(n_train, comm.rank, comm.size, seed))
    test = reader.read_rows(data_dir, reader.TEST, test_indices(n_test, comm.rank, comm.size))
    return build("epsilon", train, test, n_train, n_test)


def _enough_rows(n_train: int, workers: int) -> None:
    if n_train < workers:
        raise WorkerError(
            f"the training set has {n_train} rows, fewer than the {workers} workers: every "
            "worker needs at least one",
            exit_code=1,
        )


def _try_prepare(
    data_dir: Path, features: int, say: Callable[[str], None]
) -> tuple[str | None, bool]:
    """(error message, whether the error means 'unavailable' rather than 'damaged')."""
    try:
        reader.prepare(data_dir, features=features, say=say)
        return None, False
    except DataUnavailable as exc:
        return str(exc), True
    except WorkerError as exc:
        return str(exc), False
