"""Task 1b's trainer: the reference Trainer's loop, evaluated by top-1 and top-5 accuracy.

Everything that makes the benchmark (clock, time split, all-reduce, goal tracking on top-1
`val_accuracy`, checkpoints, reports) is the reference Trainer's (training/trainer.py). What ImageNet adds:

- its `hits` also count top-5 hits (the label among the five highest scores), ImageNet's
  second customary measure; `evaluate_and_track` posts it as `val_top5_accuracy` with the
  same epoch, step and clock as `val_accuracy`, and keeps it in the run's history; its
  predictions hold the five classes too (`predicted_top5`, best first);
- `CosineSchedule` and `PolySchedule`, the schedules `--lr-schedule cosine` and `poly` select.

Label smoothing is the Trainer's own `label_smoothing` (set by setup.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mlbench_worker.shared.evaluation.predictions import CLASS, TOP5
from mlbench_worker.training.recipe import Schedule
from mlbench_worker.training.trainer import Trainer

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


@dataclass
class PolySchedule(Schedule):
    """MLPerf's ResNet-50 schedule, as its reference defines it (mlcommons/training,
    image_classification/tensorflow2/lars_util.py, `PolynomialDecayWithWarmup`, which
    common.py's `get_optimizer` uses for SGD and LARS alike under `lr_schedule
    polynomial`): the rate rises linearly from 0 to `peak_lr` over `warmup_steps`
    (`peak_lr * step / warmup_steps` while `step <= warmup_steps`), then follows Keras'
    `PolynomialDecay` from `peak_lr` to `end_lr` with `power` over `decay_steps =
    total_steps - warmup_steps + 1` steps: `(peak_lr - end_lr) * (1 - min(s, decay_steps)
    / decay_steps) ** power + end_lr` at `s = step - warmup_steps`. MLPerf's closed rules
    fix `end_lr` at 1e-4 and the reference fixes `power` at 2.

    It warms up from 0, not from `start_lr` as the step schedule does: the schedule is
    MLPerf's, and the run's log states its keys. Build it with `poly_schedule`."""

    end_lr: float = 1e-4
    power: float = 2.0
    total_steps: int = 1

    @property
    def poly_steps(self) -> int:
        """MLPerf's `decay_steps` (logged as sgd_opt_learning_rate_decay_steps)."""
        return max(1, self.total_steps - self.warmup_steps + 1)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:  # start_lr is 0: peak_lr * step / warmup_steps
            return super().__call__(step)
        s = min(step - self.warmup_steps, self.poly_steps)
        return (self.peak_lr - self.end_lr) * (1 - s / self.poly_steps) ** self.power + self.end_lr


def poly_schedule(
    peak_lr: float, warmup_steps: int, total_steps: int, end_lr: float, power: float
) -> PolySchedule:
    """MLPerf's schedule for a run of `total_steps` steps (see PolySchedule)."""
    return PolySchedule(
        0.0, peak_lr, warmup_steps, (), 1.0, end_lr=end_lr, power=power, total_steps=total_steps
    )


class ImageNetTrainer(Trainer):
    """The reference Trainer with top-5 accuracy (see the module docstring)."""

    HIT_KINDS = 2  # top-1, top-5

    def __init__(self, *args: object, task: str, **kwargs: object) -> None:
        self.task = task  # the catalogue entry: its throughput metric and unit
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def predict(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """The five best classes, best first, and the first of them."""
        top5 = out.topk(min(5, out.shape[1]), dim=1).indices
        return {CLASS: top5[:, 0], TOP5: top5}

    def hits(self, predicted: dict[str, torch.Tensor], y: torch.Tensor) -> list[torch.Tensor]:
        """Top-1 and top-5 hits (the label among the five highest scores)."""
        top5 = predicted[TOP5]
        return [(predicted[CLASS] == y).sum(), (top5 == y[:, None]).any(dim=1).sum()]

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
