"""Task 1b's trainer: train.Trainer's loop, evaluated by top-1 and top-5 accuracy.

Everything that makes the benchmark (clock, time split, all-reduce, goal tracking on top-1
`val_accuracy`, checkpoints, reports) is train.Trainer's. What ImageNet adds:

- its `hits` also count top-5 hits (the label among the five highest scores), ImageNet's
  second customary measure; `evaluate_and_track` posts it as `val_top5_accuracy` with the
  same epoch, step and clock as `val_accuracy`, and keeps it in the run's history;
- `CosineSchedule`, the schedule `--lr-schedule cosine` selects.

Label smoothing is the Trainer's own `label_smoothing` (set by setup.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mlbench_worker.recipe import Schedule
from mlbench_worker.train import Trainer

TOP5_METRIC = "val_top5_accuracy"


@dataclass
class CosineSchedule(Schedule):
    """recipe.Schedule's linear warm-up, then peak_lr * (1 + cos(pi * t)) / 2 with t going
    from 0 at the end of the warm-up to 1 at `total_steps` (the last step of the run)."""

    total_steps: int = 1

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return super().__call__(step)
        span = max(1, self.total_steps - self.warmup_steps)
        t = min(1.0, (step - self.warmup_steps) / span)
        return self.peak_lr * 0.5 * (1.0 + math.cos(math.pi * t))


class ImageNetTrainer(Trainer):
    """train.Trainer with top-5 accuracy (see the module docstring)."""

    HIT_KINDS = 2  # top-1, top-5

    def __init__(self, *args: object, task: str, **kwargs: object) -> None:
        self.task = task  # the catalogue entry: its throughput metric and unit
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        """Top-1 and top-5 hits (the label among the five highest scores)."""
        top5 = out.topk(min(5, out.shape[1]), dim=1).indices
        return [(top5[:, 0] == y).sum(), (top5 == y[:, None]).any(dim=1).sum()]

    @property
    def val_top5(self) -> float:
        """Top-5 accuracy of the last evaluation."""
        return self.hit_rates[1]

    def evaluate_and_track(self) -> None:
        super().evaluate_and_track()
        record = self.progress.history[-1]
        record[TOP5_METRIC] = self.val_top5
        if self.comm.rank == 0:
            meta = {k: record[k] for k in ("epoch", "step", "elapsed")}
            self.reporter.metric(TOP5_METRIC, self.val_top5, **meta)
            self.reporter.flush()
        self.print(f"epoch {self.progress.epochs_done:7.3f}  val_top5 {self.val_top5:.4f}")
