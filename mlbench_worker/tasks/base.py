"""What a benchmark task fixes: everything that must be equal for two results to compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlbench_worker import catalogue
from mlbench_worker.models import MODELS


def catalogue_fields(info: catalogue.TaskInfo) -> dict:
    """What every worker task reads from its catalogue entry (the rest is its own recipe)."""
    return {
        "name": info.name,
        "model": info.model,
        "dataset": info.dataset,
        "batch_size": info.batch_size,
        "base_lr": info.learning_rate,
        "max_epochs": info.max_epochs,
        "targets": {name: goal.value for name, goal in info.goals.items()},
        "description": info.description,
    }


@dataclass(frozen=True)
class Task:
    """One closed-division image task; the worker's options may only override what is marked.

    Learning rates are given for one worker with `batch_size` images; with K workers the
    peak rate is K times higher (linear scaling), reached by a linear warm-up.
    """

    # The module whose `build` sets a run of this task up (imported only when a run starts,
    # so that listing and checking tasks stays torch-free).
    setup: ClassVar[str] = "mlbench_worker.cifar.setup"
    # The options of one family of tasks that this task reads (options.TASK_OPTIONS).
    task_options: ClassVar[tuple[str, ...]] = ("--amp", "--channels-last")
    # Whether its synthetic stand-in is files written into the data directory.
    synthetic_on_disk: ClassVar[bool] = False

    name: str
    model: str  # default model; --model may pick another depth (recorded in the summary)
    dataset: str
    batch_size: int  # per worker
    base_lr: float  # for one worker and `batch_size` images
    momentum: float
    weight_decay: float
    warmup_epochs: float
    decay_epochs: tuple[float, ...]  # multiply the rate by `decay_factor` at each
    decay_factor: float
    max_epochs: int
    targets: dict[str, float] = field(default_factory=dict)  # goal name -> val accuracy
    description: str = ""
    models: tuple[str, ...] = tuple(MODELS)  # what --model may pick: the family that fits

    def target_accuracy(self, target: str) -> float:
        """Validation accuracy (0..1) that counts as reaching the goal `target`."""
        return self.targets[target]


@dataclass(frozen=True)
class LinearTask:
    """A generalised linear model trained by synchronous mini-batch SGD (task 2).

    The rate `base_lr` is for one worker with `batch_size` samples; with K workers it is
    multiplied by min(K, `lr_scale_cap`), then reduced on plateaus of the validation loss
    (by `plateau_factor` when an evaluation does not improve the best loss by at least
    `plateau_threshold`), never below `base_lr`. Each model of `models` adjusts the rates
    by its own factor and bound (mlbench_worker/linear/GLMS).
    """

    setup: ClassVar[str] = "mlbench_worker.linear.setup"  # see Task
    task_options: ClassVar[tuple[str, ...]] = ("--l2",)
    synthetic_on_disk: ClassVar[bool] = False

    name: str
    model: str
    dataset: str
    batch_size: int  # per worker
    base_lr: float
    max_epochs: int
    l2: float  # lambda of the penalty lambda/2 * |theta|^2 on weights and bias
    features: int
    train_rows: int  # sizes of the synthetic stand-in (the real set's)
    test_rows: int
    models: tuple[str, ...] = ()
    lr_scale_cap: int = 16
    plateau_factor: float = 0.75
    plateau_threshold: float = 0.01
    targets: dict[str, float] = field(default_factory=dict)  # goal name -> val accuracy
    description: str = ""

    def target_accuracy(self, target: str) -> float:
        """Validation accuracy (0..1) that counts as reaching the goal `target`."""
        return self.targets[target]
