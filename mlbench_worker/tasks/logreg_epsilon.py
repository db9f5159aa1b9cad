"""Task 2: L2-regularised logistic regression on epsilon, synchronous mini-batch SGD.

The training details are the original mlbench reference implementation's
(mlbench-benchmarks, pytorch/linearmodels/epsilon-logistic-regression-all-reduce, and the
mlbench documentation of task 2a): plain SGD without momentum, 128 samples per worker (the
documentation's batch; the reference script used 100), rate 4 scaled to 4 x min(K, 16) for K
workers with no warm-up, reduced by 0.75 whenever the validation loss fails to improve by
0.01 (never below 4), and an L2 penalty lambda/2 |theta|^2 on all parameters with
lambda = 2.5e-6 = 1 / 400,000, one over the training set's size, as the reference chose it.
At most 20 epochs, as the reference script trains. The model, data set, goals, batch, rate
and epochs are the catalogue's (mlbench_worker/catalogue.py); `--model ridge` trains the
second GLM of this package on the same data (see mlbench_worker/linear/glm.py).
"""

from __future__ import annotations

from mlbench_worker import catalogue
from mlbench_worker.linear import GLMS
from mlbench_worker.tasks.base import LinearTask, catalogue_fields

L2 = 2.5e-6  # 1 / 400,000: the reference's choice, one over the training set's size
FEATURES = 2000
TRAIN_ROWS, TEST_ROWS = 400_000, 100_000


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
