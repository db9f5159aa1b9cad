"""Task 1b: image classification, ResNet (v1.5) on ImageNet, synchronous data-parallel SGD.

The recipe is Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1
Hour", which MLPerf's reference follows in its essentials: SGD with momentum 0.9 and weight
decay 1e-4 on every parameter, learning rate 0.1 x (global batch)/256, reached by a linear
warm-up over the first 5 epochs from the rate of one worker, then divided by 10 at epochs
30, 60 and 80 ("step"), 90 epochs in all. Each worker keeps 256 images per step, so one
worker trains with the classic rate 0.1 and K workers with 0.1K. `--lr-schedule cosine`
replaces the steps with a cosine decay from the peak to zero at the last epoch, the other
schedule in common use since (it needs no decay epochs tuned to the run's length).
`--lr-schedule poly` is MLPerf's closed ResNet-50 schedule (tasks/imagenet/train.py's
PolySchedule): a linear warm-up from 0 over the 5 warm-up epochs, then a polynomial decay
of power 2 to 1e-4 at the last step (of `--max-epochs`); a task-1b run trained with it logs
every key MLPerf's closed ResNet rules require (docs/checking.rst).

The data set, model, goals, batch, rate and epochs are the catalogue's
(mlbench_worker/shared/catalogue.py); the data pipeline is mlbench_worker/tasks/imagenet/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlbench_worker.models import IMAGENET_MODELS
from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.base import Task, catalogue_fields

# The schedules --lr-schedule offers, as the catalogue lists them for the master too (the
# API's lr_schedule); the first is the default.
LR_SCHEDULES = catalogue.IMAGENET_LR_SCHEDULES


@dataclass(frozen=True)
class ImageNetTask(Task):
    """Task with what only ImageNet training needs (defaults: the recipe above)."""

    setup: ClassVar[str] = "mlbench_worker.tasks.imagenet.setup"  # see Task
    task_options: ClassVar[tuple[str, ...]] = (
        *Task.task_options,
        "--lr-schedule",
        "--label-smoothing",
        "--zero-init-residual",
        "--crop",
        "--amp-dtype",
        "--data-workers",
    )
    synthetic_on_disk: ClassVar[bool] = True

    lr_schedule: str = LR_SCHEDULES[0]
    label_smoothing: float = 0.0  # Goyal et al. train without it; MLPerf allows 0.1
    zero_init_residual: bool = True  # Goyal et al. section 5.1
    # `poly`: the rate it ends at and the power of its decay (MLPerf's closed values).
    poly_end_lr: float = 1e-4
    poly_power: float = 2.0


def _task(info: catalogue.TaskInfo) -> ImageNetTask:
    return ImageNetTask(
        **catalogue_fields(info),
        momentum=0.9,
        weight_decay=1e-4,
        warmup_epochs=5,
        decay_epochs=(30, 60, 80),
        decay_factor=0.1,
        models=tuple(IMAGENET_MODELS),
    )


TASKS = [_task(info) for info in catalogue.TASKS.values() if info.dataset == "imagenet"]
