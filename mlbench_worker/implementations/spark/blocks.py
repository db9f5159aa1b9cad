"""What the Spark executors run: a partition's rows as one numpy block, the mini-batch
gradient of the logistic loss on a block, and the scores of a test block.

Where a block lives: in .npy files on the executor's machine, memory-mapped by its tasks.
A partition of Python objects cached by Spark itself lives in the JVM and is sent whole to
the task's Python process at every task: for a mini-batch step that is the whole shard (1.6
GB of epsilon per worker) to read 128 rows. So the cached RDD holds only each block's
`BlockSpec` (which pins partition r to the executor that made its files: Spark schedules a
task where its cached partition is), and the rows stay in the machine's page cache.

Plain numpy on purpose: this module is pickled by reference into every executor's Python
(the run's own interpreter, PYSPARK_PYTHON), which must start fast and never import torch.
The arithmetic is the reference's (tasks/epsilon/glm.py and train.py, written there with
torch): for labels y in {-1, +1} and scores z = w.x + b, the loss log(1 + exp(-y z)), its
derivative -y sigma(-y z), a row right when y z > 0; the gradient of a rank's batch is its
mean, scaled by 1/K so that the sum over partitions is the average over ranks, exactly what
the reference's all-reduce produces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.tasks.epsilon import synthetic
from mlbench_worker.tasks.epsilon.shards import epoch_order, partition, test_indices

# The tail of a gradient vector: summed loss, rows right, rows, the slowest rank's seconds.
LOSS, CORRECT, COUNT, SECONDS = range(-4, 0)
_ORDERS: dict[tuple[int, int, int, int], np.ndarray] = {}


@dataclass(frozen=True)
class BlockSpec:
    """Where partition `rank`'s rows of `split` live on an executor's machine: `folder` holds
    them as .npy files (features rows x F float32, labels -1/+1 float32, rows of the set).
    `generated` (seed, rows of the split, features) when they are the generated set, which
    the executor makes itself where the files are missing."""

    folder: str
    split: str
    rank: int
    world: int
    generated: tuple[int, int, int] | None = None

    def path(self, part: str) -> Path:
        return Path(self.folder) / f"{self.split}-{self.rank}-of-{self.world}-{part}.npy"


def store(spec: BlockSpec, x: np.ndarray, y: np.ndarray, where: np.ndarray) -> None:
    """Write a block's files (each under a temporary name, then renamed; features last, so
    their presence means the block is complete)."""
    Path(spec.folder).mkdir(parents=True, exist_ok=True)
    for part, array in (("y", y), ("rows", where), ("x", x)):
        final = spec.path(part)
        partial = final.with_name(f".{final.name}.{os.getpid()}.npy")
        np.save(partial, array)
        os.replace(partial, final)


def load(spec: BlockSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The block's (features, labels, rows of the set), memory-mapped (the machine's page
    cache keeps them in memory between steps); the generated set is made where missing."""
    if not spec.path("x").exists():
        if spec.generated is None:
            raise FileNotFoundError(
                f"{spec.path('x')} is missing: partition {spec.rank} ran on a machine that "
                "did not cache it"
            )
        seed, total, features = spec.generated
        rows = (
            partition(total, spec.rank, spec.world, seed)
            if spec.split == "train"
            else test_indices(total, spec.rank, spec.world)
        )
        x, y = synthetic.rows(seed, spec.split, total, rows, features)
        store(spec, x, y, rows)
    return tuple(np.load(spec.path(p), mmap_mode="r") for p in ("x", "y", "rows"))  # type: ignore[return-value]


def materialise(specs: Iterable[BlockSpec]) -> Iterator[BlockSpec]:
    """Make sure each block is on this machine (generating it if need be)."""
    for spec in specs:
        load(spec)
        yield spec


def to_block(
    spec_of: Callable[[int], BlockSpec],
    index: int,
    items: Iterable[tuple[int, tuple[int, np.ndarray, float, int]]],
) -> Iterator[BlockSpec]:
    """Store the rows of partition `index` (keyed by their owner, carrying their place in
    the owner's shard, features, label and row of the set) as its block, in the shard's
    order; yields the block's spec."""
    rows = [value for _, value in items]
    spec = spec_of(index)
    if rows:
        x = np.zeros((len(rows), len(rows[0][1])), np.float32)
        y = np.zeros(len(rows), np.float32)
        where = np.zeros(len(rows), np.int64)
        for place, vector, label, row in rows:
            x[place], y[place], where[place] = vector, label, row
        store(spec, x, y, where)
    yield spec


def _order(count: int, seed: int, epoch: int, rank: int) -> np.ndarray:
    """This epoch's visiting order of a block (kept while the epoch lasts)."""
    key = (count, seed, epoch, rank)
    order = _ORDERS.get(key)
    if order is None:
        _ORDERS.clear()
        order = _ORDERS[key] = epoch_order(count, seed, epoch, rank)
    return order


def logistic_sums(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray, scale: float
) -> tuple[np.ndarray, float, float]:
    """`scale` times the gradient of the summed loss over the rows (weights, then bias), the
    summed loss and the rows classified right."""
    minus_margin = -(y * (x @ theta[:-1] + theta[-1]))
    with np.errstate(over="ignore"):
        dz = (-scale * y / (1.0 + np.exp(-minus_margin))).astype(np.float32)
    grad = np.empty(theta.size, np.float32)
    grad[:-1] = x.T @ dz
    grad[-1] = dz.sum()
    loss = float(np.logaddexp(0.0, minus_margin, dtype=np.float64).sum())
    return grad, loss, float((minus_margin < 0).sum())


def batch_gradient(
    blocks: Iterable[BlockSpec], theta: np.ndarray, seed: int, epoch: int, step: int,
    batch: int, world: int,
) -> Iterator[np.ndarray]:  # fmt: skip
    """One vector per block: the gradient of its `step`-th batch of `epoch` (the reference
    rank's batch: shards.epoch_order), then each rank's seconds of arithmetic (its own slot
    only), then LOSS, CORRECT, COUNT and SECONDS (the slowest rank's)."""
    for spec in blocks:
        start = time.perf_counter()
        x, y, _ = load(spec)
        rows = _order(len(y), seed, epoch, spec.rank)[step * batch : (step + 1) * batch]
        out = np.zeros(theta.size + world + 4)
        if rows.size:
            grad, loss, correct = logistic_sums(theta, x[rows], y[rows], 1.0 / (world * rows.size))
            out[: theta.size] = grad
            out[LOSS], out[CORRECT], out[COUNT] = loss, correct, rows.size
        out[theta.size + spec.rank] = out[SECONDS] = time.perf_counter() - start
        yield out


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """treeAggregate's combine: sums, except SECONDS, of which the slowest counts."""
    seconds = max(a[SECONDS], b[SECONDS])
    a += b
    a[SECONDS] = seconds
    return a


def scores(blocks: Iterable[tuple], theta: np.ndarray) -> Iterator[tuple]:
    """Per test block: (places in the test set, labels int8, predictions int8 (+1 for a
    score of 0 or more, as the reference predicts), summed loss, rows right, rows)."""
    for spec in blocks:
        x, y, places = load(spec)
        z = x @ theta[:-1] + theta[-1]
        margin = y * z
        loss = float(np.logaddexp(0.0, -margin, dtype=np.float64).sum())
        predicted = np.where(z >= 0, 1, -1).astype(np.int8)
        yield places, y.astype(np.int8), predicted, loss, float((margin > 0).sum()), y.size
