"""Task 2: L2-regularised logistic regression on epsilon, synchronous mini-batch SGD.

The training details are the original mlbench reference implementation's
(mlbench-benchmarks, pytorch/linearmodels/epsilon-logistic-regression-all-reduce, and the
mlbench documentation of task 2a): plain SGD without momentum, 128 samples per worker (the
documentation's batch; the reference script used 100), rate 4 scaled to 4 x min(K, 16) for K
workers with no warm-up, reduced by 0.75 whenever the validation loss fails to improve by
0.01 (never below 4), and an L2 penalty lambda/2 |theta|^2 on all parameters with
lambda = 2.5e-6 = 1 / 400,000, one over the training set's size, as the reference chose it.
At most 20 epochs, as the reference script trains. The model, data set, goals, batch, rate
and epochs are the catalogue's (mlbench_worker/shared/catalogue.py); `--model ridge` trains the
second GLM of this package on the same data (see mlbench_worker/tasks/epsilon/glm.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlbench_worker.shared import catalogue, test_sizes
from mlbench_worker.tasks.base import catalogue_fields
from mlbench_worker.tasks.epsilon import GLMS


@dataclass(frozen=True)
class LinearTask:
    """A generalised linear model trained by synchronous mini-batch SGD (task 2).

    The rate `base_lr` is for one worker with `batch_size` samples; with K workers it is
    multiplied by min(K, `lr_scale_cap`), then reduced on plateaus of the validation loss
    (by `plateau_factor` when an evaluation does not improve the best loss by at least
    `plateau_threshold`), never below `base_lr`. Each model of `models` adjusts the rates
    by its own factor and bound (GLMS in mlbench_worker/tasks/epsilon/__init__.py).
    """

    setup: ClassVar[str] = "mlbench_worker.tasks.epsilon.setup"  # see Task
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


L2 = 2.5e-6  # 1 / 400,000: the reference's choice, one over the training set's size
FEATURES = 2000
TRAIN_ROWS, TEST_ROWS = 400_000, test_sizes.whole("epsilon", test_sizes.REAL)


def _task(info: catalogue.TaskInfo) -> LinearTask:
    return LinearTask(
        **catalogue_fields(info),
        l2=L2,
        features=FEATURES,
        train_rows=TRAIN_ROWS,
        test_rows=TEST_ROWS,
        models=tuple(GLMS),
    )


TASKS = [_task(info) for info in catalogue.TASKS.values() if info.dataset == "epsilon"]
