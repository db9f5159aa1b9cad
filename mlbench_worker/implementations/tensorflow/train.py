"""The TensorFlow implementation's training loop: the reference loop's, step for step.

Read `Trainer.fit` top to bottom, as mlbench_worker/training/trainer.py's: epochs of
`train_one_epoch`, each ending with `evaluate_and_track`, until the target accuracy is
reached, the time budget is spent or the last epoch is done; then the final model is
evaluated. Why a loop of our own and not `model.fit`: the benchmark's rules live in the
loop (the clock, which steps are timed and how, the rate set before every step, when to
evaluate and stop, which metrics are posted when), and they must be the reference's; with
`model.fit` they would be callbacks around a loop we cannot time inside.

The benchmark clock starts at the first training step (after data, model, the warm-up of
the step's functions (steps.py) and a barrier) and runs through evaluations. A step's time is split as the reference splits it:
data (a batch gathered and augmented by numpy, handed to TensorFlow), compute (`compute`:
forward and backward; `apply`: the SGD update) and communication (`all_reduce`, the
strategy's collective, which TensorFlow never overlaps with backward: steps.py says why
the step is split so). The communication time is all exposed: `time_comm_total` equals
`time_comm`, as in the reference without overlap. The loss, hits, image count and the stop
and report flags ride along in the gradients' all-reduce, so every rank agrees on them;
per-rank timings are gathered over MPI, which the run uses for coordination only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from mlbench_worker.data.images import shard_indices
from mlbench_worker.implementations.tensorflow.data import ImageBatches, epoch_generator
from mlbench_worker.implementations.tensorflow.steps import Steps
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation.predictions import CLASS
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.prediction_sink import PredictionSink, Shard
from mlbench_worker.training.progress import (
    IMAGES,
    LOG_SECONDS,
    REPORT,
    STOP,
    Progress,
    post_report,
    record_evaluation,
    run_epochs,
)
from mlbench_worker.training.progress import Interval as _Interval
from mlbench_worker.training.recipe import Goal, Schedule


class Trainer:
    """Everything one rank needs to train under the strategy; `fit()` runs the benchmark."""

    def __init__(
        self,
        steps: Steps,
        schedule: Schedule,
        goal: Goal,
        control: Any,  # cluster.Control: rank, size and MPI's small collectives
        train_data: ImageBatches,
        test_data: ImageBatches,
        reporter: Reporter,
        *,
        seed: int,
        task: str = catalogue.DEFAULT_TASK,
        log_every: int = 50,
        print_fn: Callable[[str], None] = print,
    ) -> None:
        self.steps = steps
        self.schedule = schedule
        self.goal = goal
        self.control = control
        self.train_data = train_data
        self.test_data = test_data
        self.reporter = reporter
        self.seed = seed
        info = catalogue.get(task)  # its throughput metric and unit (images)
        self.throughput_metric, self.throughput_unit = info.throughput_metric, info.throughput_unit
        self.log_every = log_every
        self.print = print_fn if control.rank == 0 else (lambda _msg: None)
        self.progress = Progress()
        self.clock_start: float | None = None
        # Where each evaluation's predictions go (the rank body opens it; None: nowhere).
        self.predictions: PredictionSink | None = None
        self.steps_per_epoch = train_data.steps(len(self.epoch_indices(0)))
        # What one all-reduce of the fp32 gradients counts (algorithms/interface.py's rule).
        numel = sum(int(np.prod(p.shape)) for p in steps.params)
        self.full_allreduce_bytes = 4 * numel
        self.step_bytes = self.full_allreduce_bytes if control.size > 1 else 0

    def elapsed(self) -> float:
        """Seconds on the benchmark clock (0 before the first training step)."""
        return 0.0 if self.clock_start is None else time.perf_counter() - self.clock_start

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """This rank's training indices for `epoch`, in the reference's order."""
        return shard_indices(
            len(self.train_data), self.control.rank, self.control.size, self.seed, epoch
        )

    def fit(self) -> Progress:
        """Train until the goal; always ends with an evaluation of the final model."""
        self.control.barrier()
        self.clock_start = time.perf_counter()
        return run_epochs(
            self.progress, self.goal.max_epochs, self.train_one_epoch, self.evaluate_and_track
        )

    def train_one_epoch(self, epoch: int) -> bool:
        """One pass over this rank's shard; False when the time budget stopped it early."""
        p, steps = self.progress, self.steps
        batches = self.train_data.iterate(
            self.epoch_indices(epoch), epoch_generator(self.seed, epoch, self.control.rank)
        )
        interval = _Interval()
        budget = self.goal.time_budget
        for i in range(self.steps_per_epoch):
            t0 = time.perf_counter()
            x_np, y_np = next(batches)
            x, y = tf.constant(x_np), tf.constant(y_np)
            t1 = time.perf_counter()

            grads, stats = steps.compute(x, y)
            loss_sum, correct = stats.numpy()
            stop_now = 1.0 if budget is not None and self.elapsed() >= budget else 0.0
            report_now = (
                1.0 if self.control.rank == 0 and t1 - interval.start >= LOG_SECONDS else 0.0
            )
            local = np.array([loss_sum, correct, len(y_np), stop_now, report_now], np.float32)
            t2 = time.perf_counter()

            *summed, totals = steps.all_reduce([*grads, tf.constant(local)])
            totals = totals.numpy()
            t3 = time.perf_counter()

            lr = self.schedule(p.step)
            steps.apply(summed, tf.constant(lr, tf.float32)).numpy()
            t4 = time.perf_counter()

            p.step += 1
            p.images += int(totals[IMAGES])
            p.train_seconds += t4 - t0
            interval.steps += 1
            interval.sums += totals[:3]
            interval.data += t1 - t0
            interval.compute += (t2 - t1) + (t4 - t3)
            interval.comm += t3 - t2
            interval.bytes += self.step_bytes
            stop = totals[STOP] > 0
            last = i == self.steps_per_epoch - 1 or stop
            if p.step % self.log_every == 0 or last or totals[REPORT] > 0:
                p.epochs_done = epoch + (i + 1) / self.steps_per_epoch
                self._report_interval(interval, lr)
            if stop:
                p.stop_reason = "time budget spent"
                return i == self.steps_per_epoch - 1
        return True

    def _report_interval(self, interval: _Interval, lr: float) -> None:
        """Post the interval's global training metrics and every rank's timings (rank 0),
        under the reference's names."""
        p = self.progress
        now = time.perf_counter()
        mine = (interval.data, interval.compute, interval.comm)
        p.time_data += mine[0]
        p.time_compute += mine[1]
        p.time_comm += mine[2]
        p.comm_bytes += interval.bytes
        # The all-reduce is never overlapped: its total is its exposed time.
        per_step = [t / interval.steps for t in (*mine, mine[2], interval.bytes)]
        per_rank = self.control.gather_object(per_step)
        if self.control.rank == 0:
            meta = {
                "epoch": round(p.epochs_done, 4),
                "step": p.step,
                "elapsed": round(self.elapsed(), 3),
            }
            loss_sum, correct, images = interval.sums
            rate = images / max(now - interval.start, 1e-9)
            means = np.mean(per_rank, axis=0)
            post_report(
                self.reporter, meta, loss=loss_sum / images, accuracy=correct / images, lr=lr,
                epochs=p.epochs_done, throughput=(self.throughput_metric, rate),
                timings=means[:4], comm_bytes=means[4], per_rank=per_rank,
            )  # fmt: skip
            step_time = float(sum(means[:3]))
            self.print(
                f"step {p.step:6d}  epoch {p.epochs_done:7.3f}  loss {loss_sum / images:.4f}  "
                f"acc {correct / images:.4f}  lr {lr:.4f}  {rate:8.1f} {self.throughput_unit}  "
                f"comm {100 * means[2] / max(step_time, 1e-12):4.1f}%  "
                f"elapsed {self.elapsed():8.1f}s"
            )
        interval.reset(time.perf_counter())

    def evaluate(self) -> tuple[float, float, Shard]:
        """Global validation loss and accuracy: each rank a disjoint part of the test set,
        after the ranks' batch-norm statistics are averaged (as the reference does); and
        this rank's part of the predictions."""
        self.steps.average_statistics()
        n, rank, size = len(self.test_data), self.control.rank, self.control.size
        indices = np.arange(rank, n, size)
        sums = np.zeros(3)
        labels, predicted = [], []
        for x, y in self.test_data.iterate(indices):
            stats, classes = self.steps.evaluate_batch(tf.constant(x), tf.constant(y))
            sums += stats.numpy()
            labels.append(y)
            predicted.append(classes.numpy())
        loss_sum, hits, count = self.steps.all_reduce([tf.constant(sums, tf.float32)])[0].numpy()
        shard = Shard(
            indices,
            np.concatenate(labels) if labels else np.zeros(0, np.int32),
            {CLASS: np.concatenate(predicted)} if predicted else {},
        )
        return float(loss_sum / max(count, 1)), float(hits / max(count, 1)), shard

    def evaluate_and_track(self) -> None:
        """Evaluate, post epoch metrics, and record the first time the target is reached;
        then the evaluation's predictions go to the sink, with the same step and clock."""
        val_loss, val_acc, shard = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter,
            self.control.rank, self.print,
        )  # fmt: skip
        if self.predictions is not None:
            self.predictions.submit(shard, self.progress.history[-1])

    def throughput(self) -> float:
        """Training images per second of all ranks together (evaluation excluded)."""
        p = self.progress
        return p.images / p.train_seconds if p.train_seconds > 0 else math.nan
