"""Task 2's learning rates: where training starts for K workers, and the plateau rule that
lowers the rate. Plain Python, no torch: the reference loop (setup.py, train.py) and the
Spark implementation (implementations/spark/) take the same rates from here.

The rate for K workers and B samples per worker is the task's rate times the model's factor
(glm.py) times B / (the task's batch), multiplied by min(K, 16) (the original mlbench scaled
linearly up to 16 workers) and kept below the model's stability bound if it has one (ridge:
1.0); that is where training starts, with no warm-up. The plateau rule lowers it during
training, never below the one-worker rate. `--lr` replaces the starting rate (the floor is
then the smaller of the two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlbench_worker.tasks.epsilon import GlmRates
from mlbench_worker.training.recipe import Schedule


@dataclass
class PlateauSchedule(Schedule):
    """Start at `peak_lr`; after each evaluation whose validation loss is not at least
    `threshold` below the best so far, multiply the rate by `factor`, never below `floor_lr`.

    The state is a function of the validation losses seen, so a resumed run rebuilds it from
    its history (`replay`) instead of storing it in the checkpoint.
    """

    floor_lr: float = 0.0
    threshold: float = 0.01
    lr: float = field(init=False)
    best: float = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.lr = self.peak_lr
        self.best = math.inf

    def __call__(self, step: int) -> float:
        return self.lr

    def observe(self, val_loss: float) -> None:
        if val_loss < self.best - self.threshold:
            self.best = val_loss
        else:
            self.lr = max(self.floor_lr, self.lr * self.factor)

    def replay(self, history: list[dict]) -> None:
        self.reset()
        for record in history:
            self.observe(record["val_loss"])


def plateau_schedule(
    peak_lr: float, floor_lr: float, factor: float, threshold: float
) -> PlateauSchedule:
    return PlateauSchedule(
        start_lr=peak_lr,
        peak_lr=peak_lr,
        warmup_steps=0,
        decay_steps=(),
        factor=factor,
        floor_lr=min(floor_lr, peak_lr),
        threshold=threshold,
    )


def rates(
    task: object, glm: GlmRates, batch_size: int, workers: int, lr: float | None
) -> tuple[float, float]:
    """(floor rate, starting rate) of a run of `task` (a LinearTask) with the model's `glm`
    rates, `batch_size` per worker on `workers` workers; `lr` replaces the start."""
    floor_lr = task.base_lr * glm.factor * batch_size / task.batch_size  # type: ignore[attr-defined]
    peak_lr = floor_lr * min(workers, task.lr_scale_cap)  # type: ignore[attr-defined]
    if glm.max_lr is not None:
        floor_lr, peak_lr = min(floor_lr, glm.max_lr), min(peak_lr, glm.max_lr)
    return floor_lr, lr or peak_lr
