"""What a benchmark task fixes: everything that must be equal for two results to compare."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """One closed-division task; the worker's options may only override what is marked.

    Learning rates are given for one worker with `batch_size` images; with K workers the
    peak rate is K times higher (linear scaling), reached by a linear warm-up.
    """

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

    def target_accuracy(self, target: str) -> float:
        """Validation accuracy (0..1) that counts as reaching the goal `target`."""
        return self.targets[target]
