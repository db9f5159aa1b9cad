"""The parts of a task's recipe that its set-up hands to a trainer: the learning-rate
`Schedule`, the SGD optimizer at linearly scaled rates (`momentum_sgd`), and the `Goal`.

They live apart from the training loop so that every trainer of a task (the reference
loop, torch-ddp, the TensorFlow implementation) is given the same recipe. Only
`momentum_sgd` builds a torch object, and imports torch when called: the rest (the
schedule, the goal, the rates of `scaled_rates`) is plain Python, so the TensorFlow
implementation, which never imports torch, uses the same definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Schedule:
    """Linear warm-up from `start_lr` to `peak_lr`, then multiply by `factor` at each decay."""

    start_lr: float
    peak_lr: float
    warmup_steps: int
    decay_steps: tuple[int, ...]
    factor: float

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.start_lr + (self.peak_lr - self.start_lr) * step / self.warmup_steps
        return self.peak_lr * self.factor ** sum(step >= d for d in self.decay_steps)

    @classmethod
    def of_task(cls, task: Any, start_lr: float, peak_lr: float, steps_per_epoch: int) -> Schedule:
        """The task's warm-up and decay epochs turned into steps (the step schedule of
        tasks 1a and 1b, shared by their implementations)."""
        return cls(
            start_lr=start_lr,
            peak_lr=peak_lr,
            warmup_steps=round(task.warmup_epochs * steps_per_epoch),
            decay_steps=tuple(round(e * steps_per_epoch) for e in task.decay_epochs),
            factor=task.decay_factor,
        )


def scaled_rates(
    task: Any, batch_size: int, workers: int, lr: float | None = None
) -> tuple[float, float]:
    """(start rate, peak rate), linearly scaled (Goyal et al. 2017): one worker's rate for
    `batch_size` images to start the warm-up from, `workers` times it at the peak (or `lr`,
    when given)."""
    peak_lr = lr or task.base_lr * workers * batch_size / task.batch_size
    start_lr = min(peak_lr, task.base_lr * batch_size / task.batch_size)
    return start_lr, peak_lr


def momentum_sgd(
    model: torch.nn.Module, task: Any, batch_size: int, workers: int, lr: float | None = None
) -> tuple[torch.optim.SGD, float, float]:
    """SGD with the task's momentum and weight decay at the rates of `scaled_rates`.
    Returns (optimizer, start rate, peak rate)."""
    import torch

    start_lr, peak_lr = scaled_rates(task, batch_size, workers, lr)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=start_lr, momentum=task.momentum, weight_decay=task.weight_decay
    )
    return optimizer, start_lr, peak_lr


@dataclass
class Goal:
    """When to stop: the goal's value (`accuracy`) reached, `time_budget` seconds spent, or
    `max_epochs` done.

    `metric` is what the value is of (the catalogue goal's metric: val_accuracy, reached
    from below; val_perplexity, reached from above: `direction` "down")."""

    name: str
    accuracy: float
    max_epochs: int
    time_budget: float | None = None
    metric: str = "val_accuracy"
    direction: str = "up"

    def reached(self, measured: float) -> bool:
        return measured >= self.accuracy if self.direction == "up" else measured <= self.accuracy

    def describe(self) -> str:
        """The goal in words, e.g. "70%" or "perplexity 70"."""
        if self.metric == "val_accuracy":
            return f"{self.accuracy:.0%}"
        return f"{self.metric.removeprefix('val_')} {self.accuracy:g}"
