"""Benchmark tasks: each fixes a model, a data set, the hyperparameters and the accuracy goals.

One folder per family of tasks, each with the same files: `task.py` (the tasks of the
family, built from their catalogue entries: plain data, no torch, so the option parser can
list and check them quickly), `data.py` (what each rank trains and evaluates on: the real
set or its generated stand-in, `synthetic.py`) and `setup.py` (one run's pieces: data, model,
trainer; imported only when a run starts, named by the task's `setup`). A family adds what
only it needs (a reader of its real files, a trainer of its own). A new task family is a new
folder here and a line below; what two families share stays in data/ and models/.
A task's `task_options` say which options of its family it reads.
"""

from __future__ import annotations

from mlbench_worker.tasks.base import Task
from mlbench_worker.tasks.cifar10.task import TASKS as _CIFAR10_TASKS
from mlbench_worker.tasks.epsilon.task import TASKS as _EPSILON_TASKS
from mlbench_worker.tasks.epsilon.task import LinearTask
from mlbench_worker.tasks.imagenet.task import TASKS as _IMAGENET_TASKS
from mlbench_worker.tasks.imagenet.task import ImageNetTask
from mlbench_worker.tasks.wikitext2.task import TASKS as _WIKITEXT2_TASKS
from mlbench_worker.tasks.wikitext2.task import LanguageTask
from mlbench_worker.tasks.wmt.task import TASKS as _WMT_TASKS
from mlbench_worker.tasks.wmt.task import TranslationTask

TASKS: dict[str, Task | LinearTask | LanguageTask | TranslationTask] = {
    t.name: t
    for t in [*_CIFAR10_TASKS, *_EPSILON_TASKS, *_IMAGENET_TASKS, *_WIKITEXT2_TASKS, *_WMT_TASKS]
}


def get_task(name: str) -> Task | LinearTask | LanguageTask | TranslationTask:
    """The task called `name`; KeyError if there is none (the parser reports it)."""
    return TASKS[name]


__all__ = [
    "TASKS", "ImageNetTask", "LanguageTask", "LinearTask", "Task", "TranslationTask", "get_task",
]  # fmt: skip
