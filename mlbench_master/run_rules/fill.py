"""Step 1 of `resolve`: fill. A request becomes a complete set of run fields: what it asked
for, then (when it resumes a run) its parent's fields, then the defaults of its task and of
this master (`table.defaults`; num_cpus: the run's workers' share of the machine where
the driver offers its cores, `table.default_cpus`). Nothing is refused here; `check` judges the result, and is
told which fields were asked for, inherited or filled in (`Filled`), since a rule may
apply only to what a client gave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlbench_master.api.models import Run
from mlbench_master.run_rules.algorithms import fill_algorithm
from mlbench_master.run_rules.backends import on_device
from mlbench_master.run_rules.images import fill_image_and_backend
from mlbench_master.run_rules.implementations import fill_implementation
from mlbench_master.run_rules.schedules import fill_lr_schedule
from mlbench_master.run_rules.table import default_cpus, defaults
from mlbench_worker.shared import catalogue

# The fields a resumed run takes from its parent when its request leaves them out.
INHERITED = (
    "task", "num_workers", "num_cpus", "max_bandwidth", "latency", "backend", "gpu_enabled",
    "light_target", "target", "dataset", "max_epochs", "image", "run_all_nodes", "algorithm",
    "algorithm_options", "algorithm_source", "implementation", "seed", "lr_schedule",
    "test_examples", "train_examples", "batch_size",
)  # fmt: skip
# Fields a resumed run takes together or not at all: asking for one of a group means the
# parent's others no longer apply (they would contradict it).
LINKED = (
    ("light_target", "target"),
    ("image", "image_name", "task"),
)


@dataclass(frozen=True)
class Filled:
    """A request filled in: the new run's `fields` and where they came from.

    `asked`: the request's fields (None: not given); `inherited`: what the resumed parent
    gave; `given`: the fields asked for or inherited, once an official image named its task.
    The task's catalogue entry (`info`, None for a task this master does not know) and
    whether the run trains nothing of ours (a `measurement`, the `open_division`) decide
    which rules apply.
    """

    fields: dict[str, Any]
    asked: Mapping[str, Any]
    inherited: Mapping[str, Any]
    given: frozenset[str]
    info: catalogue.TaskInfo | None
    measurement: bool
    open_division: bool

    @property
    def requested(self) -> dict[str, Any]:
        """What the client gave, before anything was filled in: asked, else inherited."""
        return {**self.inherited, **self.asked}

    @property
    def trains_nothing_of_ours(self) -> bool:
        """A measurement or a custom command: no algorithm, implementation or schedule."""
        return self.measurement or self.open_division

    @property
    def parent_id(self) -> int | None:
        return self.asked.get("resume_from")


def fill(request: Mapping[str, Any]) -> Filled:
    """`request` (None: not given) with every field filled in (see the module docstring).

    A measurement (the backend benchmark) measures every backend of its device unless asked
    for some; a run that trains nothing of ours has no algorithm, implementation or schedule.
    """
    asked = {k: v for k, v in request.items() if v is not None}
    parent_id = asked.get("resume_from")
    inherited = _parent_fields(parent_id, asked) if parent_id is not None else {}
    fields = dict(asked)
    for name, value in inherited.items():
        fields.setdefault(name, value)
    fill_image_and_backend(fields)
    given = frozenset(fields)
    table = defaults()
    info = catalogue.TASKS.get(fields.get("task") or table["task"])
    open_division = bool(fields.get("custom_image_command"))
    measurement = info is not None and info.measurement and not open_division
    if info is not None and not measurement and info.default_goal in info.goals:
        fields.setdefault("target", info.default_goal)
    if "num_cpus" not in fields:  # its workers' share of the machine, not the table's
        workers = fields.get("num_workers", table["num_workers"])
        fields["num_cpus"] = default_cpus(workers if isinstance(workers, int) else 1)
    for name, value in table.items():
        if not (measurement and name == "backend"):
            fields.setdefault(name, value)
    if measurement:
        fields.setdefault("backend", measured_backends(fields["gpu_enabled"]))
    if fields.get("latency") == 0:
        fields["latency"] = None  # 0 ms: no delay, stored as none
    none = measurement or open_division
    fill_algorithm(fields, info, none, given)
    fill_implementation(fields, asked, info, none)
    fill_lr_schedule(fields, info, none)
    return Filled(fields, asked, inherited, given, info, measurement, open_division)


def measured_backends(gpu: bool) -> str:
    """The backends a measurement measures when none is asked for: every one of its
    device's (backends.on_device), stored so the run says what it measured."""
    return ",".join(on_device(gpu))


def _parent_fields(parent_id: int, asked: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed run takes from its parent: every INHERITED field the request leaves
    out (LINKED ones as a group), its time budget unless one is asked for, and its time
    limit only when neither is (a limit is then derived from the budget)."""
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None:
        return {}  # said by check (resume_point)
    skipped = {name for group in LINKED if set(group) & set(asked) for name in group}
    if {"algorithm", "algorithm_source"} & set(asked):  # another algorithm's options mean
        skipped.update(("algorithm", "algorithm_options", "algorithm_source"))  # nothing to it
        skipped -= set(asked)
    taken = {name: getattr(parent, name) for name in INHERITED if name not in skipped}
    if "time_budget" not in asked:
        taken["time_budget"] = parent.time_budget
        if "time_limit" not in asked:
            taken["time_limit"] = parent.time_limit
    return {k: v for k, v in taken.items() if v not in (None, "") and k not in asked}
