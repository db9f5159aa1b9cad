"""Benchmark tasks: each fixes a model, a data set, the hyperparameters and the accuracy goals.

A task is plain data (no torch), so the option parser can list and check them quickly.
"""

from __future__ import annotations

from mlbench_worker.tasks.base import Task
from mlbench_worker.tasks.resnet_cifar10 import TASKS as _CIFAR10_TASKS

TASKS: dict[str, Task] = {t.name: t for t in _CIFAR10_TASKS}


def get_task(name: str) -> Task:
    """The task called `name`; KeyError if there is none (the parser reports it)."""
    return TASKS[name]


__all__ = ["TASKS", "Task", "get_task"]
