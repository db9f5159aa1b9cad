# Over 400 lines: the table, the limits and the checks of `resolve` read as one set of rules.
"""The rules of a run: what a request may ask for, what it gets for what it leaves out, and
what follows from it (its time budget and limit, the checkpoint it resumes, its set-up).

Why one module: the API, the dashboard's form, the `mlbench` command and the client each
carried defaults and checks of their own, and the same benchmark started two ways was not
the same run. Now serializers only parse, views only route, runs.py stores what `resolve`
returns, and the form and the clients read the same table (`served`, GET
/api/runs/defaults/). A new dimension of a run (an algorithm, an implementation) adds its
default to DEFAULTS, its check to `resolve` and its name to SETUP_FIELDS, nowhere else.

The package's modules: this one (the table, the limits, `resolve`), `timing` (budget and
limit), `images` (official images, the open division, the backend), `resume` (which
checkpoint a run may continue) and `errors` (what the API maps to 400 and 403).

The time rules: a reference run trains for its time budget (accuracy after time), and its
time limit (the hard stop that makes it FAILED) leaves TIME_LIMIT_MARGIN beyond the budget
for start-up and the final evaluation. A run given a limit but no budget trains for its
task's budget or for what fits in the limit, whichever is shorter (`budget_source` says
which); only a budget and a limit that were both given and do not fit are refused.
"""

from __future__ import annotations

import copy
import math
import shlex
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from mlbench_master.api.models import Run
from mlbench_master.cluster.base import ClusterError
from mlbench_master.run_rules.algorithms import algorithms_served, check_algorithm
from mlbench_master.run_rules.backends import GPU_ONLY, on_device
from mlbench_master.run_rules.errors import Errors, ResumeRefused, RunRefused, StaffOnly
from mlbench_master.run_rules.images import (
    CUSTOM_BACKEND,
    CUSTOM_IMAGE,
    LOCAL_IMAGE_REFUSED,
    resolve_image_and_backend,
)
from mlbench_master.run_rules.implementations import (
    catalogue_served,
    check_implementation,
    framework_of,
    framework_reported,
)
from mlbench_master.run_rules.resume import (
    CHECKPOINT_METRIC,
    RESUMABLE_STATES,
    ResumePoint,
    resume_point,
)
from mlbench_master.run_rules.schedules import check_lr_schedule, schedule_choices
from mlbench_master.run_rules.timing import (
    TIME_LIMIT_MARGIN,
    budget_source,
    default_time_limit,
    effective_time_budget,
    fitting_budget,
    minimum_time_limit,
    resolve_time,
    task_time_budget,
    time_budget_for,
    time_budget_source,
)
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.algorithm_catalogue import DEFAULT_ALGORITHM
from mlbench_worker.shared.implementation_catalogue import DEFAULT_IMPLEMENTATION

__all__ = [
    "CHECKPOINT_METRIC", "CUSTOM_BACKEND", "CUSTOM_IMAGE", "DEFAULTS", "INHERITED",
    "LOCAL_IMAGE_REFUSED", "RESUMABLE_STATES", "SETUP_FIELDS", "TIME_LIMIT_MARGIN",
    "ResumePoint", "ResumeRefused", "RunRefused", "StaffOnly", "budget_source",
    "default_time_limit", "defaults", "effective_time_budget", "fitting_budget", "framework_of",
    "framework_reported", "limits", "MAX_SEED", "minimum_time_limit", "resolve", "resume_point", "served", "setup_of",
    "task_time_budget", "time_budget_for", "time_budget_source", "TRAINING_ONLY",
]  # fmt: skip

# What a run gets for a field its request leaves out, whoever sends it (API, form, CLI,
# ApiClient). num_cpus and max_bandwidth are the original client's documented defaults, so
# its create_run (and ours, which keeps its signature) sends what the others leave out.
# Numbers above the operator's limits are lowered to them (`defaults`). None: derived (the
# task's budget, a limit from the budget) or not set (no latency, the task's epochs).
DEFAULTS: dict[str, Any] = {
    "task": catalogue.DEFAULT_TASK,
    "num_workers": 2,
    "num_cpus": 2.0,
    "max_bandwidth": 1000,
    "latency": None,
    "backend": "mpi",
    "gpu_enabled": False,
    "light_target": False,
    "target": "standard",
    "dataset": "auto",
    "time_budget": None,
    "max_epochs": None,
    "time_limit": None,
    "run_all_nodes": False,
    "algorithm": DEFAULT_ALGORITHM,
    "algorithm_options": {},  # the algorithm's own defaults (algorithm_catalogue.py)
    "implementation": DEFAULT_IMPLEMENTATION,
    "seed": 42,  # the worker's --seed default, so runs from before seeds were chosen agree
    "lr_schedule": "",  # the task's default (TaskInfo.lr_schedules[0]; task 1b: step)
}
# The fields a resumed run takes from its parent when its request leaves them out.
INHERITED = (
    "task", "num_workers", "num_cpus", "max_bandwidth", "latency", "backend", "gpu_enabled",
    "light_target", "target", "dataset", "max_epochs", "image", "run_all_nodes", "algorithm",
    "algorithm_options", "implementation", "seed", "lr_schedule",
)  # fmt: skip
# The dimensions of a run's set-up, recorded in every manifest as `setup` so a result says
# what it was measured under. The comparison rule (comparable.js, cli/report.py, held to
# tests/rules/comparison_cases.json) compares task, data set, target, backend, CPUs, device
# and command among them; the network is shown beside results (the compare page's column).
SETUP_FIELDS = (
    "task", "dataset", "target", "backend", "num_cpus", "gpu_enabled", "max_bandwidth",
    "latency", "custom_image_command", "algorithm", "algorithm_options", "implementation",
    "lr_schedule",
)  # fmt: skip
# The request fields only a training run takes: a measurement (the backend benchmark) refuses
# each by name when given (beyond the defaults every client sends: dataset "auto",
# light_target false): _check_measurement the first five, check_algorithm, check_implementation
# and check_lr_schedule the others. Served (`training_only`) so the form disables them for a
# measurement; tests/rules/test_form_rules.py holds this list to those checks.
TRAINING_ONLY = (
    "target", "light_target", "dataset", "max_epochs", "resume_from", "algorithm",
    "algorithm_options", "implementation", "lr_schedule",
)  # fmt: skip
MAX_SEED = 2**31 - 1  # the largest seed a run may have: what its database column holds
STAFF_ONLY = {
    "custom_image_command": "runs code of your choice on the workers",
    "custom_image_name": "runs its own entry point in the worker pods",
}


def limits() -> dict[str, float]:
    """The operator's limits (MLBENCH_MAX_*): what `resolve` checks and the form offers."""
    return {
        "workers": int(settings.MLBENCH_MAX_WORKERS),
        "cpus": float(settings.MLBENCH_MAX_CPUS),
        "bandwidth": int(settings.MLBENCH_MAX_BANDWIDTH),
        "latency": float(settings.MLBENCH_MAX_LATENCY),
        "gpus": int(settings.MLBENCH_MAX_GPUS),
        "time_limit": int(settings.MLBENCH_MAX_TIME_LIMIT),
    }


def default_task() -> str:
    """The catalogue's default task when this master offers it, else its first task."""
    offered = list(settings.MLBENCH_TASKS)
    return catalogue.DEFAULT_TASK if catalogue.DEFAULT_TASK in offered else offered[0]


def defaults() -> dict[str, Any]:
    """DEFAULTS on this master: the offered default task, numbers within its limits."""
    lim = limits()
    table = copy.deepcopy(dict(DEFAULTS, task=default_task()))
    table["num_workers"] = min(table["num_workers"], lim["workers"])
    table["num_cpus"] = min(table["num_cpus"], lim["cpus"])
    table["max_bandwidth"] = min(table["max_bandwidth"], lim["bandwidth"])
    return table


def served() -> dict[str, Any]:
    """What GET /api/runs/defaults/ answers: the table, the limits and, per offered task,
    what a run of it gets without options (backend, goal, time budget and limit); and the
    rules the dashboard applies in the browser as data, so its scripts keep no list of their
    own: the backends per device and implementation, the fields a measurement refuses, the
    run states (which are active, final, resumable)."""
    tasks = {}
    for name in settings.MLBENCH_TASKS:
        info = catalogue.get(name)
        budget = task_time_budget(name)
        tasks[name] = {
            "backend": _measured_backends(False) if info.measurement else DEFAULTS["backend"],
            "target": "" if info.measurement else info.default_goal,
            "goals": list(info.goals),
            "datasets": list(info.datasets),
            "time_budget": budget,
            "time_limit": default_time_limit(budget),
            "algorithms": list(info.algorithms),
            "implementations": list(info.implementations),
            "lr_schedules": list(info.lr_schedules),
            "measurement": info.measurement,
        }
    return {
        "defaults": defaults(),
        "limits": limits(),
        "time_limit_margin": TIME_LIMIT_MARGIN,
        "open_division_time_limit": default_time_limit(None),
        "tasks": tasks,
        "algorithms": algorithms_served(),
        "implementations": catalogue_served(list(settings.MLBENCH_TASKS), DEFAULTS["backend"]),
        "lr_schedules": {
            t: s for t, s in schedule_choices().items() if t in settings.MLBENCH_TASKS
        },
        "backends": {"cpu": on_device(False), "gpu": on_device(True)},
        "training_only": list(TRAINING_ONLY),
        "run_states": {
            "active": list(Run.ACTIVE_STATES),
            "final": list(Run.FINAL_STATES),
            "resumable": list(RESUMABLE_STATES),
        },
    }


def resolve(request: Mapping[str, Any], user: Any = None) -> dict[str, Any]:
    """The fields of a new Run from what a client asked for (None: not given).

    Fields left out come from the parent run when resuming, else from `defaults`; the time
    limit, the goal of `light_target` and a measurement's backends are derived. Raises
    RunRefused with every broken rule, then StaffOnly for a field only staff may set.
    """
    errors = Errors()
    asked = {k: v for k, v in request.items() if v is not None}
    parent_id = asked.get("resume_from")
    fields = dict(asked)
    inherited = _parent_fields(parent_id, asked) if parent_id is not None else {}
    for name, value in inherited.items():
        fields.setdefault(name, value)
    resolve_image_and_backend(fields, errors)
    given = set(fields)  # asked for, or the parent's: checked against the task below
    budget_asked, limit_asked = "time_budget" in fields, "time_limit" in fields
    table = defaults()
    info = catalogue.TASKS.get(fields.get("task") or table["task"])
    open_division = bool(fields.get("custom_image_command"))
    measurement = info is not None and info.measurement and not open_division
    if info is not None and not measurement and info.default_goal in info.goals:
        fields.setdefault("target", info.default_goal)
    for name, value in table.items():
        if not (measurement and name == "backend"):
            fields.setdefault(name, value)
    _check_ranges(fields, errors)
    check_algorithm(fields, asked, info, measurement or open_division, errors)
    check_implementation(fields, asked, info, measurement or open_division, errors)
    check_lr_schedule(fields, asked, info, measurement or open_division, errors)
    if fields["gpu_enabled"] and limits()["gpus"] < 1:
        errors.add("gpu_enabled", "this cluster offers no GPUs (MLBENCH_MAX_GPUS=0); set "
                   "gpu_enabled to false")  # fmt: skip
    if fields.get("backend") in GPU_ONLY and not fields["gpu_enabled"]:
        errors.add("backend", f"the {fields['backend']} backend needs GPUs: set gpu_enabled to "
                   f"true or use {' or '.join(on_device(False))}")  # fmt: skip
    if fields["light_target"] and "target" in asked and asked["target"] != "light":
        errors.add("target", "light_target=true asks for target 'light'; do not also give "
                   "another target")  # fmt: skip
    if measurement:
        _check_measurement(fields, asked, info, errors)
    elif info is not None and "image_name" not in errors:
        _check_goal_and_data(fields, given, info, errors)
    resolve_time(fields, budget_asked, limit_asked, limits()["time_limit"], errors)
    if parent_id is not None and not errors:
        _check_resume(fields, errors)
    if errors:
        for name, messages in errors.items():
            source = "image" if name == "image_name" else name
            if source in inherited and source not in asked:
                errors[name] = [f"{m} (the value of run {parent_id}, which this run resumes: "
                                f"give {name} to change it)" for m in messages]  # fmt: skip
        raise RunRefused(dict(errors))
    for name, why in STAFF_ONLY.items():
        if fields.get(name) and not getattr(user, "is_staff", False):
            raise StaffOnly(f"{name} {why}: only staff users may set it")
    if fields["light_target"]:
        fields["target"] = "light"
    return fields


# Fields a resumed run takes together or not at all: asking for one of a group means the
# parent's others no longer apply (they would contradict it).
LINKED = (
    ("light_target", "target"),
    ("image", "image_name", "task"),
)


def _parent_fields(parent_id: int, asked: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed run takes from its parent: every INHERITED field the request leaves
    out (LINKED ones as a group), its time budget unless one is asked for, and its time
    limit only when neither is (a limit is then derived from the budget)."""
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None:
        return {}  # said by _check_resume
    skipped = {name for group in LINKED if set(group) & set(asked) for name in group}
    if "algorithm" in asked:  # another algorithm's options mean nothing to it
        skipped.add("algorithm_options")
    taken = {name: getattr(parent, name) for name in INHERITED if name not in skipped}
    if "time_budget" not in asked:
        taken["time_budget"] = parent.time_budget
        if "time_limit" not in asked:
            taken["time_limit"] = parent.time_limit
    return {k: v for k, v in taken.items() if v not in (None, "") and k not in asked}


def _range(field: str, low: str, high: str, setting: str | None) -> str:
    limit = f" (limit {setting})" if setting else ""
    return f"{field} must be between {low} and {high}{limit}"


def _check_ranges(fields: dict[str, Any], errors: Errors) -> None:
    """Each given number within the operator's limits, each name one this master knows."""
    lim = limits()
    workers = fields.get("num_workers")
    if workers is not None:
        if not 1 <= workers <= lim["workers"]:
            errors.add("num_workers", _range("num_workers", "1", str(lim["workers"]),
                                             "MLBENCH_MAX_WORKERS"))  # fmt: skip
        else:
            _check_cluster_room(workers, fields.get("num_cpus"), errors)
    checks = {
        "num_cpus": (lambda v: math.isfinite(v) and 0 < v <= lim["cpus"],
                     _range("num_cpus", "more than 0", f"{lim['cpus']:g}", "MLBENCH_MAX_CPUS")),
        "max_bandwidth": (lambda v: 1 <= v <= lim["bandwidth"],
                          _range("max_bandwidth", "1", f"{lim['bandwidth']} mbit/s",
                                 "MLBENCH_MAX_BANDWIDTH")),
        "latency": (lambda v: math.isfinite(v) and 0 <= v <= lim["latency"],
                    _range("latency", "0", f"{lim['latency']:g} ms", "MLBENCH_MAX_LATENCY")),
        "time_limit": (lambda v: 1 <= v <= lim["time_limit"],
                       _range("time_limit", "1", f"{lim['time_limit']} s",
                              "MLBENCH_MAX_TIME_LIMIT")),
        "time_budget": (lambda v: math.isfinite(v) and v > 0,
                        "time_budget must be a positive number of seconds"),
        "max_epochs": (lambda v: 1 <= v <= 100000, _range("max_epochs", "1", "100000", None)),
        "seed": (lambda v: 0 <= v <= MAX_SEED, _range("seed", "0", str(MAX_SEED), None)),
    }  # fmt: skip
    for name, (ok, message) in checks.items():
        if fields.get(name) is not None and not ok(fields[name]):
            errors.add(name, message)
    if fields.get("latency") == 0:
        fields["latency"] = None  # 0 ms: no delay, stored as none
    names = {
        "target": catalogue.goal_names(),
        "dataset": catalogue.dataset_names(),
        "task": list(settings.MLBENCH_TASKS),
    }
    for name, known in names.items():
        if name in fields and fields[name] not in known:
            more = " (MLBENCH_TASKS)" if name == "task" else ""
            what = f"{name} {fields[name]!r} is not known; known tasks:" if name == "task" else (
                f"{name} {fields[name]!r} is not one of")  # fmt: skip
            errors.add(name, f"{what} {', '.join(known)}{more}")
    command = fields.get("custom_image_command")
    if command:
        try:
            shlex.split(command)  # as cluster/mpirun.py will
        except ValueError as exc:
            errors.add("custom_image_command", f"custom_image_command cannot be split into "
                       f"arguments like a shell would ({exc}): close every quote or escape it "
                       "with a backslash")  # fmt: skip


def _check_cluster_room(workers: int, cpus: float | None, errors: Errors) -> None:
    """A cluster that cannot grow (the local one) refuses more ranks now, not in the job. A
    driver that cannot even be set up is not the client's fault: the job says why."""
    from mlbench_master.cluster.drivers import get_driver

    try:
        driver = get_driver()
    except Exception:  # noqa: BLE001 - a misconfigured master, said by the run's job
        return
    try:
        driver.check_workers(workers)
    except ClusterError as exc:
        errors.add("num_workers", str(exc))
    if cpus is not None:
        try:
            driver.check_cpus(cpus)
        except ClusterError as exc:
            errors.add("num_cpus", str(exc))


def _measured_backends(gpu: bool) -> str:
    return ",".join(on_device(gpu))


def _check_measurement(fields: dict[str, Any], asked: Mapping[str, Any],
                       info: catalogue.TaskInfo, errors: Errors) -> None:  # fmt: skip
    """A measurement (the backend benchmark) trains nothing, so the training fields are
    refused by name, except the defaults clients send for every run (dataset "auto",
    light_target false). Its `backend` is the list it measures: the one asked for, else
    every backend of the run's device, stored so the run says what it measured."""
    why = f"task {info.name} measures communication"
    refused = {
        "target": ("target" in asked, "it has no accuracy goal; leave it out"),
        "light_target": (bool(fields["light_target"]), "it has no accuracy goal"),
        "dataset": (fields["dataset"] != "auto", "it reads no data; leave it out"),
        "max_epochs": (fields.get("max_epochs") is not None, "it has no epochs; leave it out"),
        "resume_from": ("resume_from" in fields, "it keeps no checkpoints"),
        "num_workers": (fields["num_workers"] < 2, "it needs 2 workers or more"),
    }
    for name, (bad, reason) in refused.items():
        if bad:
            errors.add(name, f"{why}: {reason}")
    fields["target"] = ""
    fields.setdefault("backend", _measured_backends(fields["gpu_enabled"]))


def _check_goal_and_data(fields: dict[str, Any], given: set[str], info: catalogue.TaskInfo,
                         errors: Errors) -> None:  # fmt: skip
    """Each task has its own goals and data sets (the catalogue says which): a goal or data
    set that was asked for (or taken from a resumed parent) must be one of them."""
    if "target" in given or fields["light_target"]:
        target = "light" if fields["light_target"] else fields["target"]
        if target not in info.goals:
            goals = f"its goals: {', '.join(info.goals)}" if info.goals else "it has none"
            errors.add("target", f"task {info.name} has no goal {target!r}; {goals}")
    if "dataset" in given and fields["dataset"] not in info.datasets:
        sets = (f"runs on {', '.join(info.datasets)}" if info.datasets
                else "reads no data set")  # fmt: skip
        errors.add("dataset", f"task {info.name} {sets}, not {fields['dataset']!r}")


def _check_resume(fields: dict[str, Any], errors: Errors) -> None:
    if fields.get("custom_image_command"):
        errors.add("resume_from", "a custom command cannot resume a checkpoint: resume_from is "
                   "for reference tasks")  # fmt: skip
        return
    try:
        resume_point(fields["resume_from"], task=fields["task"],
                     num_workers=fields["num_workers"], dataset=fields["dataset"],
                     algorithm=fields["algorithm"] or None, seed=fields.get("seed"),
                     lr_schedule=fields["lr_schedule"],
                     algorithm_options=fields["algorithm_options"],
                     implementation=fields["implementation"] or None)  # fmt: skip
    except ResumeRefused as exc:
        errors.add("resume_from", str(exc))


def setup_of(run: Run) -> dict[str, Any]:
    """The comparability inputs of `run` (SETUP_FIELDS), as its manifest records them."""
    return {name: getattr(run, name) for name in SETUP_FIELDS}
