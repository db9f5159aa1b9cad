"""What a benchmark task fixes: everything that must be equal for two results to compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlbench_worker.models import MODELS
from mlbench_worker.shared import catalogue


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
    setup: ClassVar[str] = "mlbench_worker.tasks.cifar10.setup"
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
