"""The training loop the task-2 engine implementations (spark, flink) share on rank 0: the
benchmark clock, the reference's SGD steps an epoch, the interval report with its split of
compute and communication, evaluation and goal tracking (training/progress.py).

Why one loop: between the engines and the reference only the engine may differ, so what a
step, a report or an evaluation means is written once; each engine supplies how a step's
gradient sum and an evaluation's parts are computed (`step_total`, `evaluate_parts`).
A step's time is split as the reference splits it, with what an engine lets us see: compute
is the slowest rank's arithmetic (each rank times its own work and returns the seconds in
its slot of the combined vector: spark/blocks.batch_gradient), communication the rest of the
step's wall time on rank 0; data is 0 (the rows are with the engine before the clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from mlbench_worker.implementations.spark import blocks
from mlbench_worker.shared.evaluation.predictions import LABEL
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.prediction_sink import PredictionSink, Shard
from mlbench_worker.training.progress import (
    LOG_SECONDS,
    Progress,
    post_report,
    record_evaluation,
    run_epochs,
)
from mlbench_worker.training.recipe import Goal


class EngineTrainer:
    """Rank 0's application: `fit()` runs the benchmark with the subclass's
    `train_one_epoch` (by default the reference's SGD steps, `sgd_epoch`)."""

    def __init__(
        self, goal: Goal, reporter: Reporter, *, features: int, world: int, log_every: int,
        say: Callable[[str], None], throughput_metric: str = "samples_per_sec",
        throughput_unit: str = "samples/s",
    ) -> None:  # fmt: skip
        self.goal, self.reporter = goal, reporter
        self.world = world
        self.theta = np.zeros(features + 1, np.float32)  # the reference's start: zero
        self.throughput_metric, self.throughput_unit = throughput_metric, throughput_unit
        self.log_every = log_every
        self.say = say
        self.progress = Progress()
        self.clock_start: float | None = None
        self.predictions: PredictionSink | None = None
        self.lr = 0.0
        self.step_bytes = 0  # what one step moves per rank (subclasses)
        # The reference's SGD (subclasses that take its steps set these).
        self.steps_per_epoch = 0
        self.l2 = 0.0
        self.schedule: Callable[[int], float] | None = None

    def elapsed(self) -> float:
        return 0.0 if self.clock_start is None else time.perf_counter() - self.clock_start

    def fit(self) -> Progress:
        """Train until the goal; always ends with an evaluation of the final model."""
        self.clock_start = time.perf_counter()
        return run_epochs(
            self.progress, self.goal.max_epochs, self.train_one_epoch, self.evaluate_and_track
        )

    def over_budget(self) -> bool:
        return self.goal.time_budget is not None and self.elapsed() >= self.goal.time_budget

    def train_one_epoch(self, epoch: int) -> bool:
        return self.sgd_epoch(epoch)

    def step_total(self, epoch: int, i: int) -> np.ndarray:
        """The engine's sum over the ranks of their batch gradients for step `i` of
        `epoch`, followed by each rank's seconds and blocks.LOSS ... (blocks.add's
        layout)."""
        raise NotImplementedError

    def step(self, epoch: int, i: int) -> np.ndarray:
        """One synchronous step; the combined vector's tail (each rank's seconds, then
        blocks.LOSS ...)."""
        total = self.step_total(epoch, i)
        grad = total[: self.theta.size].astype(np.float32)
        self.lr = self.schedule(self.progress.step)
        # torch.optim.SGD with weight decay, momentum 0: theta -= lr (grad + lambda theta)
        grad += np.float32(self.l2) * self.theta
        self.theta = self.theta - np.float32(self.lr) * grad
        return total[self.theta.size :]

    def sgd_epoch(self, epoch: int) -> bool:
        """The shard's steps in the reference's order, reported every `log_every` steps
        (or LOG_SECONDS); False when the budget ran out before the epoch's end."""
        p = self.progress
        sums, steps, start, wall = np.zeros(3), 0, time.perf_counter(), 0.0
        ranks = np.zeros(self.world)
        for i in range(self.steps_per_epoch):
            t0 = time.perf_counter()
            tail = self.step(epoch, i)
            took = time.perf_counter() - t0
            p.step += 1
            p.images += int(tail[blocks.COUNT])
            p.train_seconds += took
            wall += took
            steps += 1
            sums += tail[[blocks.LOSS, blocks.CORRECT, blocks.COUNT]]
            ranks += tail[: self.world]
            stop = self.over_budget()
            last = i == self.steps_per_epoch - 1 or stop
            if p.step % self.log_every == 0 or last or time.perf_counter() - start >= LOG_SECONDS:
                p.epochs_done = epoch + (i + 1) / self.steps_per_epoch
                self.report(sums, steps, wall, start, ranks)
                sums, steps, start, wall = np.zeros(3), 0, time.perf_counter(), 0.0
                ranks = np.zeros(self.world)
            if stop:
                p.stop_reason = "time budget spent"
                return i == self.steps_per_epoch - 1
        return True

    def report(
        self, sums: np.ndarray, steps: int, wall: float, start: float, ranks: np.ndarray,
        samples: float = 0.0,
    ) -> None:  # fmt: skip
        """Post an interval's training metrics under the reference's names: `sums` (loss,
        right, rows) over `steps` steps that took `wall` seconds on rank 0 since `start`,
        `ranks` each rank's seconds of compute in them (`samples`: the rows trained on,
        when not `rows`). A step waits for its slowest rank: compute is the slowest rank's,
        comm the rest of the step (module docstring)."""
        p = self.progress
        per_step = wall / max(steps, 1)
        rank_compute = np.minimum(ranks / max(steps, 1), per_step)
        compute = float(rank_compute.max()) if rank_compute.size else 0.0
        comm = per_step - compute
        p.time_compute += compute * steps
        p.time_comm += comm * steps
        p.time_comm_total += comm * steps
        p.comm_bytes += self.step_bytes * steps
        loss_sum, right, rows = (float(v) for v in sums)
        rate = (samples or rows) / max(time.perf_counter() - start, 1e-9)
        meta = {
            "epoch": round(p.epochs_done, 4),
            "step": p.step,
            "elapsed": round(self.elapsed(), 3),
        }
        per_rank = [
            (0.0, float(mine), per_step - float(mine), per_step - float(mine))
            for mine in rank_compute
        ]
        post_report(
            self.reporter, meta, loss=loss_sum / max(rows, 1), accuracy=right / max(rows, 1),
            lr=self.lr, epochs=p.epochs_done, throughput=(self.throughput_metric, rate),
            timings=(0.0, compute, comm, comm), comm_bytes=self.step_bytes,
            per_rank=per_rank if self.world > 1 else (),
        )  # fmt: skip
        self.say(
            f"step {p.step:6d}  epoch {p.epochs_done:7.3f}  loss {loss_sum / max(rows, 1):.4f}  "
            f"acc {right / max(rows, 1):.4f}  lr {self.lr:.4f}  {rate:8.1f} {self.throughput_unit}  "
            f"comm {100 * comm / max(per_step, 1e-12):4.1f}%  elapsed {self.elapsed():8.1f}s"
        )

    def evaluate_parts(self) -> list:
        """The engine's blocks.scores of theta, one tuple per rank's block, in rank
        order."""
        raise NotImplementedError

    def evaluate(self) -> tuple[float, float, Shard]:
        """Validation loss and accuracy of theta over the whole test set, and the
        predictions in the test set's order."""
        parts = self.evaluate_parts()
        loss = sum(p[3] for p in parts)
        right = sum(p[4] for p in parts)
        count = sum(p[5] for p in parts)
        shard = Shard(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            {LABEL: np.concatenate([p[2] for p in parts])},
        )
        return loss / max(count, 1), right / max(count, 1), shard

    def evaluate_and_track(self) -> None:
        val_loss, val_acc, shard = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter, 0,
            self.say,
        )  # fmt: skip
        self.after_evaluation(val_loss)
        if self.predictions is not None:
            self.predictions.submit(shard, self.progress.history[-1])

    def after_evaluation(self, val_loss: float) -> None:
        """What the trainer's schedule learns from an evaluation (nothing by default)."""

    def throughput(self) -> float:
        p = self.progress
        return p.images / p.train_seconds if p.train_seconds > 0 else math.nan
