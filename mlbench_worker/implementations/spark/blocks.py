"""What the Spark executors run: a partition's rows as one numpy block, the mini-batch
gradient of the logistic loss on a block, and the scores of a test block.

Plain numpy on purpose: this module is pickled by reference into every executor's Python
(the run's own interpreter, PYSPARK_PYTHON), which must start fast and never import torch.
The arithmetic is the reference's (tasks/epsilon/glm.py and train.py, written there with
torch): for labels y in {-1, +1} and scores z = w.x + b, the loss log(1 + exp(-y z)), its
derivative -y sigma(-y z), a row right when y z > 0; the gradient of a rank's batch is its
mean, scaled by 1/K so that the sum over partitions is the average over ranks, exactly what
the reference's all-reduce produces.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from mlbench_worker.tasks.epsilon.shards import epoch_order

# The tail of a gradient vector: summed loss, rows right, rows, seconds of arithmetic.
LOSS, CORRECT, COUNT, SECONDS = range(-4, 0)
_ORDERS: dict[tuple[int, int, int, int], np.ndarray] = {}


def to_block(
    index: int, items: Iterable[tuple[int, tuple[int, Any, float, int]]]
) -> Iterator[tuple]:
    """The rows of partition `index`, keyed by their owner and carrying (place in the
    owner's shard, features, label, row of the set), as one block: (rank, features
    rows x F float32, labels float32, rows of the set), in the shard's order."""
    rows = [value for _, value in items]
    if not rows:
        return
    features = rows[0][1].size
    x = np.zeros((len(rows), features), np.float32)
    y = np.zeros(len(rows), np.float32)
    where = np.zeros(len(rows), np.int64)
    for place, vector, label, row in rows:
        x[place] = vector.toArray()
        y[place] = label
        where[place] = row
    yield index, x, y, where


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
    blocks: Iterable[tuple], theta: np.ndarray, seed: int, epoch: int, step: int, batch: int,
    world: int,
) -> Iterator[np.ndarray]:  # fmt: skip
    """One vector per block: the gradient of its `step`-th batch of `epoch` (the reference
    rank's batch: shards.epoch_order), then LOSS, CORRECT, COUNT and SECONDS."""
    for rank, x, y, _ in blocks:
        start = time.perf_counter()
        rows = _order(len(y), seed, epoch, rank)[step * batch : (step + 1) * batch]
        out = np.zeros(theta.size + 4)
        if rows.size:
            grad, loss, correct = logistic_sums(theta, x[rows], y[rows], 1.0 / (world * rows.size))
            out[: theta.size] = grad
            out[LOSS], out[CORRECT], out[COUNT] = loss, correct, rows.size
        out[SECONDS] = time.perf_counter() - start
        yield out


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """treeAggregate's combine: sums, except the seconds, of which the slowest counts."""
    seconds = max(a[SECONDS], b[SECONDS])
    a += b
    a[SECONDS] = seconds
    return a


def scores(blocks: Iterable[tuple], theta: np.ndarray) -> Iterator[tuple]:
    """Per test block: (places in the test set, labels int8, predictions int8 (+1 for a
    score of 0 or more, as the reference predicts), summed loss, rows right, rows)."""
    for _, x, y, places in blocks:
        z = x @ theta[:-1] + theta[-1]
        margin = y * z
        loss = float(np.logaddexp(0.0, -margin, dtype=np.float64).sum())
        predicted = np.where(z >= 0, 1, -1).astype(np.int8)
        yield places, y.astype(np.int8), predicted, loss, float((margin > 0).sum()), y.size
