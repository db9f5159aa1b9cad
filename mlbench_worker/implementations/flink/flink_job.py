"""What Flink's Python workers run in the training job: one subtask per rank holding that
rank's rows, and the combiner of their gradients.

The job (flink_train.py builds it) reads commands from the driver, one text line each:
`HEADER THETA` with HEADER a JSON object (`id`, `kind`: "warm", "step" or "eval", and for a
step `epoch` and `step`) and THETA the model's float32 bytes in base64. The line reaches
every `Subtask` (a broadcast); subtask r answers with rank r's part: "warm" loads its blocks
(making them where missing), "step" the gradient of the reference rank r's batch
(implementations/spark/blocks.py: the same rows, order and arithmetic as the reference), "eval"
its test rows' scores and predictions. `Combine`, keyed by the command's id, waits for the K
parts and emits one record: the sum of the gradients (the all-reduce; the slowest rank's
seconds kept, as blocks.add does) or the K evaluation parts in rank order.

Plain numpy and pickled tuples: these classes are pickled by reference into every Python
worker (the ranks' own interpreter, `python.executable`), which never imports torch.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from pyflink.datastream.functions import FlatMapFunction, KeyedProcessFunction, RuntimeContext

from mlbench_worker.implementations.spark import blocks
from mlbench_worker.tasks.epsilon.shards import partition, test_indices


def command(header: dict, theta: np.ndarray) -> str:
    """One command line for the job (module docstring)."""
    encoded = base64.b64encode(np.ascontiguousarray(theta, np.float32).tobytes()).decode()
    return f"{json.dumps(header, separators=(',', ':'))} {encoded}\n"


def parse(line: str) -> tuple[dict, np.ndarray]:
    header, _, encoded = line.partition(" ")
    return json.loads(header), np.frombuffer(base64.b64decode(encoded), np.float32)


def ensure_block(spec: blocks.BlockSpec, epsilon_dir: str | None, total: int, seed: int) -> None:
    """Make `spec`'s block where missing: the generated set by blocks.load itself; epsilon's
    from the reference's cache under `epsilon_dir` (tasks/epsilon/reader.py): the rows of
    reference rank `spec.rank` among the split's first `total`, in its shard's order."""
    if spec.path("x").exists() or spec.generated is not None or epsilon_dir is None:
        return
    from mlbench_worker.tasks.epsilon import reader

    rows = (
        partition(total, spec.rank, spec.world, seed)
        if spec.split == reader.TRAIN
        else test_indices(total, spec.rank, spec.world)
    )
    x, y = reader.read_rows(epsilon_dir, spec.split, rows)
    blocks.store(spec, np.asarray(x, np.float32), np.asarray(y, np.float32), rows)


class Subtask(FlatMapFunction):
    """Rank r's part of every command (module docstring); r is the subtask's index."""

    def __init__(
        self, train: list, test: list, totals: tuple[int, int], seed: int, batch: int,
        epsilon_dir: str | None,
    ) -> None:  # fmt: skip
        self.train, self.test = train, test  # one BlockSpec per rank
        self.totals = totals  # rows of the training and the test set
        self.seed, self.batch, self.epsilon_dir = seed, batch, epsilon_dir
        self.rank = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.rank = runtime_context.get_index_of_this_subtask()

    def flat_map(self, value: str) -> Iterator[tuple]:
        header, theta = parse(value)
        ident, kind = int(header["id"]), header["kind"]
        train, test = self.train[self.rank], self.test[self.rank]
        if kind == "warm":
            start = time.perf_counter()
            for spec, total in zip((train, test), self.totals, strict=True):
                ensure_block(spec, self.epsilon_dir, total, self.seed)
                blocks.load(spec)
            yield ident, kind, self.rank, time.perf_counter() - start
        elif kind == "step":
            (out,) = blocks.batch_gradient(
                [train], theta, self.seed, int(header["epoch"]), int(header["step"]), self.batch,
                train.world,
            )  # fmt: skip
            yield ident, kind, self.rank, out
        else:
            (part,) = blocks.scores([test], theta)
            yield ident, kind, self.rank, part


class Combine(KeyedProcessFunction):
    """The K parts of a command (keyed by its id) as one record (module docstring). Its
    parts wait in the operator's memory, not in Flink state: the job keeps no checkpoints
    (a failed subtask fails the run, as a failed rank does)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.parts: dict[int, dict[int, Any]] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        self.parts = {}

    def process_element(self, value: tuple, ctx: Any) -> Iterator[tuple]:
        ident, kind, rank, part = value
        waiting = self.parts.setdefault(ident, {})
        waiting[rank] = part
        if len(waiting) < self.world:
            return
        del self.parts[ident]
        ordered = [waiting[r] for r in range(self.world)]
        if kind == "step":
            total = ordered[0].copy()
            for other in ordered[1:]:
                total = blocks.add(total, other)
            yield ident, kind, total
        else:
            yield ident, kind, ordered
