"""Benchmark tasks: each fixes a model, a data set, the hyperparameters and the accuracy goals.

A task is plain data (no torch), so the option parser can list and check them quickly. Its
`setup` names the module that sets a run of it up (mlbench_worker/cifar/ for task 1a,
imagenet/ for task 1b, linear/ for task 2), imported only when a run starts; its
`task_options` say which options of one family of tasks it reads.
"""

from __future__ import annotations

from mlbench_worker.tasks.base import LinearTask, Task
from mlbench_worker.tasks.logreg_epsilon import TASKS as _EPSILON_TASKS
from mlbench_worker.tasks.resnet_cifar10 import TASKS as _CIFAR10_TASKS
from mlbench_worker.tasks.resnet_imagenet import TASKS as _IMAGENET_TASKS
from mlbench_worker.tasks.resnet_imagenet import ImageNetTask

TASKS: dict[str, Task | LinearTask] = {
    t.name: t for t in [*_CIFAR10_TASKS, *_EPSILON_TASKS, *_IMAGENET_TASKS]
}


def get_task(name: str) -> Task | LinearTask:
    """The task called `name`; KeyError if there is none (the parser reports it)."""
    return TASKS[name]


__all__ = ["TASKS", "ImageNetTask", "LinearTask", "Task", "get_task"]
