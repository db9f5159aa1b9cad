"""What a run has done so far and the sums of one report interval: the bookkeeping every
implementation's training loop keeps the same way (trainer.py's reference loop and
implementations/tensorflow/train.py), so their metrics and summaries mean the same. Torch-free: the
TensorFlow process imports it too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlbench_worker.shared import metric_points as points

# Scalars that ride along in the gradient buffer's all-reduce, so ranks agree on them for free.
LOSS, CORRECT, IMAGES, STOP, REPORT = range(5)
# Report at least this often (seconds, decided by rank 0) so progress shows early on slow machines.
LOG_SECONDS = 15.0


@dataclass
class Progress:
    """What the run has done so far; saved in checkpoints, reported in the summary."""

    epoch: int = 0  # completed epochs
    step: int = 0  # completed optimizer steps (global, same on every rank)
    epochs_done: float = 0.0  # fractional, for a run stopped mid-epoch
    elapsed_before: float = 0.0  # benchmark seconds spent before a resume
    images: int = 0  # images trained on, all ranks together
    train_seconds: float = 0.0  # time inside training steps (throughput's denominator)
    time_data: float = 0.0  # this rank's totals
    time_compute: float = 0.0
    time_comm: float = 0.0  # exposed: the wait after backward
    time_comm_total: float = 0.0  # exposed + in flight during backward (module docstring)
    comm_bytes: float = 0.0  # this rank's bytes sent, all steps (algorithms/interface.py)
    val_accuracy: float | None = None
    val_loss: float | None = None
    best_val_accuracy: float | None = None
    time_to_target: float | None = None
    # This rank's comm_bytes when the goal was first reached (evaluations follow a report,
    # so every step before them is counted): the bytes to target, whatever the algorithm
    # sends in which step (DiLoCo's outer steps, local SGD's averaging).
    comm_bytes_at_target: float | None = None
    stop_reason: str = ""
    history: list[dict] = field(default_factory=list)


class Interval:
    """Sums over the steps since the last report (global loss/accuracy, local timings)."""

    def __init__(self) -> None:
        self.reset(time.perf_counter())

    def reset(self, now: float) -> None:
        self.start = now
        self.steps = 0
        self.sums = np.zeros(3)  # loss, correct, images (global)
        self.data = self.compute = self.comm = self.comm_total = 0.0
        self.bytes = 0


def outcome(progress: Progress, target_accuracy: float) -> dict[str, Any]:
    """The summary's entries about the goal and how far the run got, the same for every
    implementation (run_record.py)."""
    return {
        "target_accuracy": target_accuracy,
        "reached": progress.time_to_target is not None,
        "time_to_target": progress.time_to_target,
        "final_val_accuracy": progress.val_accuracy,
        "best_val_accuracy": progress.best_val_accuracy,
        "epochs": round(progress.epochs_done, 4),
    }


def post_report(
    reporter: Any,
    meta: dict[str, Any],
    *,
    loss: float,
    accuracy: float,
    lr: float,
    epochs: float,
    throughput: tuple[str, float],
    timings: Sequence[float],
    comm_bytes: float,
    per_rank: Sequence[Sequence[float]] = (),
) -> None:
    """Rank 0's points of one training report, the same names and order for every
    implementation (the reference, TensorFlow, Spark), named by the declarations
    (shared/metric_points.py): the global loss and accuracy, the learning rate, the
    progress (epoch, and the benchmark clock `meta` carries), the throughput as the task
    names it, the means over ranks of the four timings (points.TIMINGS order) and of the
    bytes sent, and each rank's timings when `per_rank` holds more than one rank."""
    metric = reporter.metric
    metric(points.TRAIN_LOSS, loss, **meta)
    metric(points.TRAIN_ACCURACY, accuracy, **meta)
    metric(points.LEARNING_RATE, lr, **meta)
    metric(points.EPOCH, epochs, **meta)
    metric(points.ELAPSED, meta[points.CLOCK], **meta)
    metric(throughput[0], throughput[1], **meta)
    for name, value in zip(points.TIMINGS, timings, strict=True):
        metric(name, float(value), **meta)
    metric(points.COMM_BYTES, float(comm_bytes), **meta)
    if len(per_rank) > 1:
        for r, times in enumerate(per_rank):
            for name, value in zip(points.RANK_TIMINGS, times, strict=False):
                metric(name, value, rank=r, **meta)


def finite(x: float) -> float | None:
    """`x`, or None for a rate that could not be measured (JSON has no NaN)."""
    return x if math.isfinite(x) else None


def run_epochs(
    p: Progress,
    max_epochs: int,
    train_one_epoch: Callable[[int], bool],
    evaluate: Callable[[], None],
    after_epoch: Callable[[], None] | None = None,
) -> Progress:
    """The benchmark's epoch loop, shared by every implementation so they stop alike: an
    evaluation after each epoch (or after a budget-stopped part of one), `after_epoch` after
    each whole one (a checkpoint), and always one of the final model, also when resumed
    from a checkpoint of the last epoch."""
    evaluated_at = -1
    while p.epoch < max_epochs and not p.stop_reason:
        finished_epoch = train_one_epoch(p.epoch)
        if finished_epoch:
            p.epoch += 1
        p.epochs_done = p.epoch if finished_epoch else p.epochs_done
        evaluate()
        evaluated_at = p.step
        if finished_epoch and after_epoch is not None:
            after_epoch()
    if not p.stop_reason:
        p.stop_reason = "max epochs done"
    if evaluated_at != p.step:
        evaluate()
    return p


def record_evaluation(
    p: Progress,
    val_loss: float,
    val_acc: float,
    elapsed: float,
    goal: Any,
    reporter: Any,
    rank: int,
    say: Callable[[str], None],
    extra: dict[str, float] | None = None,
) -> None:
    """After an evaluation, the same for every implementation: the progress, rank 0's
    epoch metrics, the first time the `goal` (recipe.Goal) was reached, and a line.

    `extra`: further validation metrics of the task (task 3's val_perplexity), posted and
    recorded beside the loss and accuracy; the goal is judged on its own metric, whichever
    of them it is.

    The evaluation's clock is read once and kept to the millisecond (`clock`), and the
    time to target is that same number: the master finds the evaluation that reached the
    goal by it (its MLPerf log stops there), so a time to target read a hair earlier than
    the evaluation it names would leave that evaluation out of the log."""
    p.val_loss, p.val_accuracy = val_loss, val_acc
    p.best_val_accuracy = max(val_acc, p.best_val_accuracy or 0.0)
    clock = round(elapsed, 3)
    meta = {"epoch": round(p.epochs_done, 4), "step": p.step, points.CLOCK: clock}
    measured = {"val_accuracy": val_acc, "val_loss": val_loss, **(extra or {})}
    p.history.append({**measured, **meta})
    if rank == 0:
        for name, value in measured.items():
            reporter.metric(name, value, **meta)
        reporter.metric(points.EPOCH, p.epochs_done, **meta)
        reporter.metric(points.ELAPSED, elapsed, **meta)
    metric = getattr(goal, "metric", "val_accuracy")
    if p.time_to_target is None and goal.reached(measured[metric]):
        p.time_to_target = clock
        p.comm_bytes_at_target = p.comm_bytes
        p.stop_reason = p.stop_reason or "target reached"  # a spent budget came first
        if rank == 0:
            reporter.metric(points.TIME_TO_TARGET, clock, **meta)
    shown = "".join(f"  {name.removeprefix('val_')} {v:.4g}" for name, v in (extra or {}).items())
    say(
        f"epoch {p.epochs_done:7.3f}  val_loss {val_loss:.4f}  val_acc {val_acc:.4f}{shown}  "
        f"(target {goal.name} {goal.describe()}"
        f"{', REACHED' if p.time_to_target is not None else ''})  elapsed {elapsed:8.1f}s"
    )
    reporter.flush()
