"""Task 1b's trainer: train.Trainer's loop, evaluated by top-1 and top-5 accuracy.

Everything that makes the benchmark (clock, time split, all-reduce, goal tracking on top-1
`val_accuracy`, checkpoints, reports) is train.Trainer's. What ImageNet adds:

- `evaluate` also counts top-5 hits (the label among the five highest scores), ImageNet's
  second customary measure; `evaluate_and_track` posts it as `val_top5_accuracy` with the
  same epoch, step and clock as `val_accuracy`, and keeps it in the run's history;
- `CosineSchedule`, the schedule `--lr-schedule cosine` selects.

Label smoothing is the Trainer's own `label_smoothing` (set by setup.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.comm import average_buffers
from mlbench_worker.train import Schedule, Trainer

TOP5_METRIC = "val_top5_accuracy"


@dataclass
class CosineSchedule(Schedule):
    """Train.Schedule's linear warm-up, then peak_lr * (1 + cos(pi * t)) / 2 with t going
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

    def __init__(self, *args: object, task: str, **kwargs: object) -> None:
        self.task = task  # the catalogue entry: its throughput metric and unit
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.val_top5: float | None = None

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Global validation loss and top-1 accuracy; top-5 into `val_top5`."""
        average_buffers(self.model, self.comm)  # the same batch-norm statistics everywhere
        self.model.eval()
        n = len(self.test_data)
        idx = np.arange(self.comm.rank, n, self.comm.size)
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)
        for x, y in self.test_data.iterate(idx):
            with torch.autocast(
                self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
            ):
                out = self.model(x)
            out = out.float()
            top5 = out.topk(min(5, out.shape[1]), dim=1).indices
            sums[0] += F.cross_entropy(out, y, reduction="sum")
            sums[1] += (top5[:, 0] == y).sum()
            sums[2] += (top5 == y[:, None]).any(dim=1).sum()
            sums[3] += y.shape[0]
        loss_sum, top1, top5_hits, count = self.comm.allreduce_sums(sums.tolist())
        self.model.train()
        self.val_top5 = float(top5_hits / max(count, 1))
        return float(loss_sum / max(count, 1)), float(top1 / max(count, 1))

    def evaluate_and_track(self) -> None:
        super().evaluate_and_track()
        record = self.progress.history[-1]
        record[TOP5_METRIC] = self.val_top5
        if self.comm.rank == 0:
            meta = {k: record[k] for k in ("epoch", "step", "elapsed")}
            self.reporter.metric(TOP5_METRIC, self.val_top5, **meta)
            self.reporter.flush()
        self.print(f"epoch {self.progress.epochs_done:7.3f}  val_top5 {self.val_top5:.4f}")
