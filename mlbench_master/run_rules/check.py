"""Step 2 of `resolve`: check. Every rule a filled request breaks, collected so that a client
hears of all of them at once (400 naming each field), and nothing changed: `check` only
reads the `Filled` it is given, the operator's limits and the cluster's answers
(`ClusterLimits`, data the caller asked the driver for), and what a resumed run's parent
left (its state and last checkpoint)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from mlbench_master.run_rules.algorithms import check_algorithm, staff_only_algorithm
from mlbench_master.run_rules.backends import GPU_ONLY, on_device
from mlbench_master.run_rules.cluster import ClusterLimits
from mlbench_master.run_rules.errors import Errors, ResumeRefused, StaffOnly
from mlbench_master.run_rules.fill import Filled
from mlbench_master.run_rules.images import check_image_and_backend
from mlbench_master.run_rules.implementations import check_implementation
from mlbench_master.run_rules.resume import resume_point
from mlbench_master.run_rules.schedules import check_lr_schedule
from mlbench_master.run_rules.table import MAX_SEED, limits
from mlbench_master.run_rules.test_set import check_test_examples
from mlbench_master.run_rules.timing import check_time
from mlbench_master.run_rules.training_size import check_training_size
from mlbench_worker.shared import catalogue

# Fields that run code of the client's choice, and why only staff users may set them.
STAFF_ONLY = {
    "custom_image_command": "runs code of your choice on the workers",
    "custom_image_name": "runs its own entry point in the worker pods",
}


def check(run: Filled, cluster: ClusterLimits) -> Errors:
    """Every broken rule of `run`, as messages per field in the order found ({}: none).

    A resumed run's checkpoint is looked at only when everything else holds (its refusal
    would otherwise restate another field's problem)."""
    errors = Errors()
    fields, asked, info = run.fields, run.asked, run.info
    none = run.trains_nothing_of_ours
    check_image_and_backend(run.requested, errors)
    _check_ranges(fields, cluster, errors)
    options = run.requested.get("algorithm_options", {})  # as given, before completion
    check_algorithm(fields, options, asked, info, none, errors)
    check_implementation(fields, asked, info, none, cluster.modules, errors)
    check_lr_schedule(fields, asked, info, none, errors)
    check_test_examples(fields, info, run.measurement, errors)
    check_training_size(fields, info, run.measurement, run.open_division, errors)
    if fields["gpu_enabled"] and limits()["gpus"] < 1:
        errors.add("gpu_enabled", "this cluster offers no GPUs (MLBENCH_MAX_GPUS=0); set "
                   "gpu_enabled to false")  # fmt: skip
    if fields.get("backend") in GPU_ONLY and not fields["gpu_enabled"]:
        errors.add("backend", f"the {fields['backend']} backend needs GPUs: set gpu_enabled to "
                   f"true or use {' or '.join(on_device(False))}")  # fmt: skip
    if fields["light_target"] and "target" in asked and asked["target"] != "light":
        errors.add("target", "light_target=true asks for target 'light'; do not also give "
                   "another target")  # fmt: skip
    if run.measurement:
        _check_measurement(fields, asked, info, errors)
    elif info is not None and "image_name" not in errors:
        _check_goal_and_data(fields, run.given, info, errors)
    check_time(fields, "time_budget" in run.given, "time_limit" in run.given,
               limits()["time_limit"], errors)  # fmt: skip
    if run.parent_id is not None and not errors:
        _check_resume(fields, errors)
    return errors


def blame_parent(errors: Errors, run: Filled) -> dict[str, list[str]]:
    """`errors` with the messages about a value the resumed parent gave (not the request)
    saying so, and how to change it."""
    blamed = {}
    for name, messages in errors.items():
        source = "image" if name == "image_name" else name
        if source in run.inherited and source not in run.asked:
            messages = [f"{m} (the value of run {run.parent_id}, which this run resumes: "
                        f"give {name} to change it)" for m in messages]  # fmt: skip
        blamed[name] = list(messages)
    return blamed


def check_staff_only(fields: Mapping[str, Any], user: Any) -> None:
    """StaffOnly (403) for the first field only staff users may set, set by another user."""
    for name, why in STAFF_ONLY.items():
        if fields.get(name) and not getattr(user, "is_staff", False):
            raise StaffOnly(f"{name} {why}: only staff users may set it")
    why_staff = staff_only_algorithm(fields)
    if why_staff and not getattr(user, "is_staff", False):
        raise StaffOnly(why_staff)


def _range(field: str, low: str, high: str, setting: str | None) -> str:
    limit = f" (limit {setting})" if setting else ""
    return f"{field} must be between {low} and {high}{limit}"


def _check_ranges(fields: dict[str, Any], cluster: ClusterLimits, errors: Errors) -> None:
    """Each number within the operator's limits and the cluster's, each name one this
    master knows, a custom command one that splits into arguments."""
    lim = limits()
    workers = fields["num_workers"]
    if not 1 <= workers <= lim["workers"]:
        errors.add("num_workers", _range("num_workers", "1", str(lim["workers"]),
                                         "MLBENCH_MAX_WORKERS"))  # fmt: skip
    else:  # a cluster that cannot grow (the local one) refuses more ranks now, not in the job
        if workers in cluster.workers:
            errors.add("num_workers", cluster.workers[workers])
        if fields["num_cpus"] in cluster.cpus:
            errors.add("num_cpus", cluster.cpus[fields["num_cpus"]])
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


def _check_measurement(fields: dict[str, Any], asked: Mapping[str, Any],
                       info: catalogue.TaskInfo, errors: Errors) -> None:  # fmt: skip
    """A measurement (the backend benchmark) trains nothing, so the training fields are
    refused by name, except the defaults clients send for every run (dataset "auto",
    light_target false)."""
    why = f"task {info.name} measures communication"
    refused = {
        "target": ("target" in asked, "it has no accuracy goal; leave it out"),
        "light_target": (bool(fields["light_target"]), "it has no accuracy goal"),
        "dataset": (fields["dataset"] != "auto", "it reads no data; leave it out"),
        "max_epochs": (fields.get("max_epochs") is not None, "it has no epochs; leave it out"),
        "test_examples": (
            fields.get("test_examples") is not None,
            "it has no test set; leave it out",
        ),
        "resume_from": ("resume_from" in fields, "it keeps no checkpoints"),
        "num_workers": (fields["num_workers"] < 2, "it needs 2 workers or more"),
    }
    for name, (bad, reason) in refused.items():
        if bad:
            errors.add(name, f"{why}: {reason}")


def _check_goal_and_data(fields: dict[str, Any], given: frozenset[str],
                         info: catalogue.TaskInfo, errors: Errors) -> None:  # fmt: skip
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
        resume_point(fields["resume_from"], fields)
    except ResumeRefused as exc:
        errors.add("resume_from", str(exc))
