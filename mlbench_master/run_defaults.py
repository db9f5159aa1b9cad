"""What a run gets for a field its request leaves out (`DEFAULTS`), and the time limit that
comes of it for the default task.

One table, read by everything that needs a default: the run rules (`run_rules.DEFAULTS`,
served at GET /api/runs/defaults/ and so read by the form, `mlbench run` and the client),
the `Run` model's field defaults (rows made in code) and `RunSpec`'s (snapshots that driver
tests build by hand). A value written anywhere else would drift from it.

Why a module of its own, outside run_rules/: the rules read the models (a resumed run's
parent and its checkpoints), so the models could not import them without a cycle, and
cluster/ must never reach api/. This module imports nothing of Django, the API or the
drivers: only the worker's torch-free catalogues (mlbench_worker.shared, the one part of the
worker the master may import), which name the default task, algorithm and implementation.
"""

from __future__ import annotations

import math
from typing import Any

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.algorithm_catalogue import DEFAULT_ALGORITHM
from mlbench_worker.shared.implementation_catalogue import DEFAULT_IMPLEMENTATION

# What a run gets for a field its request leaves out, whoever sends it (API, form, CLI,
# ApiClient). num_cpus and max_bandwidth are the original client's documented defaults, so
# its create_run (and ours, which keeps its signature) sends what the others leave out.
# Numbers above the operator's limits are lowered to them (`run_rules.defaults`). None:
# derived (the task's budget, a limit from the budget) or not set (no latency, the task's
# epochs).
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
    "algorithm_options": {},  # the algorithm's own defaults (shared/algorithm_catalogue.py)
    "implementation": DEFAULT_IMPLEMENTATION,
    "seed": catalogue.DEFAULT_SEED,  # the worker's --seed default too
    "lr_schedule": "",  # the task's default (TaskInfo.lr_schedules[0]; task 1b: step)
}

# Seconds a run's time limit must leave beyond its time budget, for what the budget does not
# count: start-up before the benchmark clock starts (mpirun, imports, getting the data: a
# first CIFAR-10 download, or converting epsilon from its .bz2 files, about 9 minutes here)
# and the evaluation of the final model. A limit shorter than twice the margin keeps half.
TIME_LIMIT_MARGIN = 900


def minimum_time_limit(time_budget: float | None) -> int | None:
    """The shortest time limit a run with this budget may have (None: no budget, no rule)."""
    return None if time_budget is None else math.ceil(time_budget) + TIME_LIMIT_MARGIN


# DEFAULTS["time_limit"] is derived from the run's budget; for a run of the default task
# that gives neither, it comes to this (the seed's 2 hours plus the margin).
DEFAULT_TASK_TIME_LIMIT = minimum_time_limit(catalogue.get(DEFAULTS["task"]).time_budget)
