"""What a run has done so far and the sums of one report interval: the bookkeeping every
implementation's training loop keeps the same way (train.py's reference loop and
tensorflow_run/train.py), so their metrics and summaries mean the same. Torch-free: the
TensorFlow process imports it too.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    comm_bytes: float = 0.0  # this rank's bytes sent, all steps (algorithms/base.py)
    val_accuracy: float | None = None
    val_loss: float | None = None
    best_val_accuracy: float | None = None
    time_to_target: float | None = None
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
    implementation (run.py, tensorflow_run/session.py)."""
    return {
        "target_accuracy": target_accuracy,
        "reached": progress.time_to_target is not None,
        "time_to_target": progress.time_to_target,
        "final_val_accuracy": progress.val_accuracy,
        "best_val_accuracy": progress.best_val_accuracy,
        "epochs": round(progress.epochs_done, 4),
    }


def finite(x: float) -> float | None:
    """`x`, or None for a rate that could not be measured (JSON has no NaN)."""
    return x if math.isfinite(x) else None
