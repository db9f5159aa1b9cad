"""A run's learning-rate schedule (`lr_schedule`, the worker's --lr-schedule).

Only tasks whose catalogue entry lists schedules (TaskInfo.lr_schedules: task 1b) take
one; the catalogue is the one list, read by the worker's option too. Left out, a run of
such a task stores its task's default (the first it lists), so the stored field always
says what the run trains with and two runs are compared by it exactly; a task without
schedules stores "". It matters for the result (MLPerf's closed ResNet rules accept only
`poly`), so it is a dimension of the set-up and a resumed run keeps its parent's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue


def schedule_choices() -> dict[str, list[str]]:
    """Task -> the schedules it offers (the first its default), for the tasks that have any."""
    return {name: list(t.lr_schedules) for name, t in catalogue.TASKS.items() if t.lr_schedules}


def _with_schedules() -> str:
    return ", ".join(f"{name} ({', '.join(s)})" for name, s in schedule_choices().items())


def fill_lr_schedule(fields: dict[str, Any], info: catalogue.TaskInfo | None,
                     no_training: bool) -> None:  # fmt: skip
    """A schedule left out becomes the task's default (the first it lists) when the task
    has a choice and the run trains with our code; "" otherwise. In place."""
    name = fields.get("lr_schedule") or ""
    if not name and info is not None and info.lr_schedules and not no_training:
        name = info.lr_schedules[0]
    fields["lr_schedule"] = name


def check_lr_schedule(fields: dict[str, Any], asked: Mapping[str, Any],
                      info: catalogue.TaskInfo | None, no_training: bool,
                      errors: Errors) -> None:  # fmt: skip
    """A given schedule must be one of the run's task's; a task without schedules (or a
    run that trains nothing of ours: a measurement, a custom command) takes none."""
    name = fields["lr_schedule"]
    if not name or info is None:
        return
    if no_training or not info.lr_schedules:
        why = (f"task {info.name} trains nothing of ours" if no_training
               else f"task {info.name} has no choice of schedule")  # fmt: skip
        source = "asked for" if "lr_schedule" in asked else "the resumed run's"
        errors.add("lr_schedule", f"{why}, so lr_schedule ({source} {name!r}) does not "
                   f"apply; leave it out. Tasks with schedules: {_with_schedules()}")  # fmt: skip
        return
    if name not in info.lr_schedules:
        errors.add("lr_schedule", f"lr_schedule {name!r} is not one of task {info.name}'s: "
                   f"{', '.join(info.lr_schedules)} (default {info.lr_schedules[0]}; "
                   "poly is MLPerf's closed ResNet schedule)")  # fmt: skip


def effective_schedule(task: str | None, lr_schedule: str | None) -> str:
    """What a run trains with: its schedule, else its task's default ("" for none)."""
    info = catalogue.TASKS.get(task or "")
    if lr_schedule:
        return lr_schedule
    return info.lr_schedules[0] if info is not None and info.lr_schedules else ""
