"""The rules of a run: what a request may ask for, what it gets for what it leaves out, and
what follows from it (its time budget and limit, the checkpoint it resumes, its set-up).

A parsed request becomes the fields of a new run in three steps (the caller fills it once,
asks the driver about the filled run, then `resolve` checks and derives):

1. fill (fill.py): the request's fields, then, for a resumed run, its parent's, then the
   defaults (the one table DEFAULTS, mlbench_master/run_defaults.py, on this master:
   `defaults`) and those of its task (goal, schedule, a measurement's backends, the
   backend its implementation runs on); an algorithm's options completed.
2. check (check.py): every rule the filled request breaks, all collected, nothing
   changed; RunRefused (400) names each field, then StaffOnly (403) a field only staff
   may set. The cluster's limits come in as data (`ClusterLimits`, cluster.py), which the
   caller asks the driver for with `cluster_limits(filled)`: the rules never call it.
3. derive (derive.py): the goal of light_target and the time limit (timing.py); the time
   budget and the set-up follow from the stored run (`time_budget_for`, `setup_of`).

Why one package: the API, the dashboard's form, the `mlbench` command and the client each
carried defaults and checks of their own, and the same benchmark started two ways was not
the same run. Now serializers only parse, views only route, runs.py stores what `resolve`
returns, and the form and the clients read the same table (`served`, GET
/api/runs/defaults/). A new dimension of a run (an algorithm, an implementation) adds its
default to DEFAULTS, its fill and check beside the others' and its name to SETUP_FIELDS.

The other modules: `table` (DEFAULTS within the operator's limits), `cores` (the CPUs a
run of the local driver gets without asking: its workers' share of the machine's cores;
and the warning of a run that asks for more threads than the cores), `timing` (budget and
limit), `images` (official images, the open division, the backend), `backends` (which
backends a run may ask for with and without GPUs, and which one it gets: the one place of
those rules, for fill, check and `served`), `algorithms`, `implementations`, `schedules`,
`resume` (which checkpoint a run may continue, one function for the rules and
runs.new_run) and `errors` (what the API maps to 400 and 403).

The time rules: a reference run trains for its time budget (accuracy after time), and its
time limit (the hard stop that makes it FAILED) leaves TIME_LIMIT_MARGIN beyond the budget
for start-up and the final evaluation. A run given a limit but no budget trains for its
task's budget or for what fits in the limit, whichever is shorter (`budget_source` says
which); only a budget and a limit that were both given and do not fit are refused.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mlbench_master.api.models import Run
from mlbench_master.run_defaults import DEFAULTS, TIME_LIMIT_MARGIN, minimum_time_limit
from mlbench_master.run_rules.algorithms import algorithms_served
from mlbench_master.run_rules.backends import on_device
from mlbench_master.run_rules.check import blame_parent, check, check_staff_only
from mlbench_master.run_rules.cluster import ClusterLimits, cluster_limits
from mlbench_master.run_rules.cores import machine_cores, oversubscription
from mlbench_master.run_rules.derive import derive
from mlbench_master.run_rules.errors import ResumeRefused, RunRefused, StaffOnly
from mlbench_master.run_rules.fill import INHERITED, Filled, fill
from mlbench_master.run_rules.fill import measured_backends as _measured_backends
from mlbench_master.run_rules.images import CUSTOM_BACKEND, CUSTOM_IMAGE, LOCAL_IMAGE_REFUSED
from mlbench_master.run_rules.implementations import (
    catalogue_served,
    framework_of,
    framework_reported,
)
from mlbench_master.run_rules.resume import (
    CHECKPOINT_METRIC,
    RESUMABLE_STATES,
    ResumePoint,
    resume_point,
)
from mlbench_master.run_rules.schedules import schedule_choices
from mlbench_master.run_rules.table import MAX_SEED, default_cpus, defaults, limits
from mlbench_master.run_rules.timing import (
    budget_source,
    default_time_limit,
    effective_time_budget,
    fitting_budget,
    task_time_budget,
    time_budget_for,
    time_budget_source,
)
from mlbench_worker.shared import catalogue

__all__ = [
    "CHECKPOINT_METRIC", "CUSTOM_BACKEND", "CUSTOM_IMAGE", "DEFAULTS", "INHERITED",
    "LOCAL_IMAGE_REFUSED", "MAX_SEED", "RESUMABLE_STATES", "SETUP_FIELDS", "TIME_LIMIT_MARGIN",
    "TRAINING_ONLY", "ClusterLimits", "Filled", "ResumePoint", "ResumeRefused", "RunRefused",
    "StaffOnly", "budget_source", "check", "cluster_limits", "default_cpus",
    "default_time_limit", "defaults", "derive", "effective_time_budget", "fill", "fitting_budget", "framework_of",
    "framework_reported", "limits", "machine_cores", "minimum_time_limit", "oversubscription",
    "resolve", "resume_point", "run_warnings", "served", "setup_of", "task_time_budget", "time_budget_for", "time_budget_source",
]  # fmt: skip

# The dimensions of a run's set-up, recorded in every manifest as `setup` so a result says
# what it was measured under. The comparison rule (comparable.js, client/cli/comparison.py, held to
# tests/rules/comparison_cases.json) compares task, data set, target, backend, CPUs, device
# and command among them; the network is shown beside results (the compare page's column).
SETUP_FIELDS = (
    "task", "dataset", "target", "backend", "num_cpus", "gpu_enabled", "max_bandwidth",
    "latency", "custom_image_command", "algorithm", "algorithm_options", "implementation",
    "lr_schedule", "test_examples", "train_examples", "batch_size",
)  # fmt: skip
# The request fields only a training run takes: a measurement (the backend benchmark) refuses
# each by name when given (beyond the defaults every client sends: dataset "auto",
# light_target false): check.py's _check_measurement the first five and test_examples,
# check_algorithm, check_implementation and check_lr_schedule the others. Served (`training_only`) so the form
# disables them for a measurement; tests/rules/test_form_rules.py holds this list to those
# checks.
TRAINING_ONLY = (
    "target", "light_target", "dataset", "max_epochs", "resume_from", "algorithm",
    "algorithm_options", "implementation", "lr_schedule", "test_examples", "train_examples",
    "batch_size",
)  # fmt: skip


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


def resolve(run: Filled, user: Any, cluster: ClusterLimits) -> dict[str, Any]:
    """The fields of a new Run from a filled request (`fill(request)`), in the steps of the
    module docstring; `cluster` is what the driver said of it (`cluster_limits(run)`). Raises
    RunRefused with every broken rule, then StaffOnly for a field only staff may set."""
    errors = check(run, cluster)
    if errors:
        raise RunRefused(blame_parent(errors, run))
    check_staff_only(run.fields, user)
    return derive(run)


def run_warnings(run: Run, cores: int | None) -> list[str]:
    """What a stored run should know before its numbers are read, in words: today, that it
    asks for more threads than the `cores` its workers share (`machine_cores()`; None: the
    driver offers none). Accepted, not refused: a user may mean to measure exactly that."""
    said = oversubscription(run.num_workers, run.num_cpus, cores)
    return [said] if said else []


def setup_of(run: Run) -> dict[str, Any]:
    """The comparability inputs of `run` (SETUP_FIELDS), as its manifest records them."""
    return {name: getattr(run, name) for name in SETUP_FIELDS}
