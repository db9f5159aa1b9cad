"""The run defaults and the operator's limits as they stand on this master: DEFAULTS
(mlbench_master/run_defaults.py) with the offered default task and its numbers lowered to
the limits (MLBENCH_MAX_*) and, on a driver that offers its cores, num_cpus to the default
workers' share of them (cores.py), which fill and check read and GET /api/runs/defaults/
serves."""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings

from mlbench_master.run_defaults import DEFAULTS
from mlbench_master.run_rules.cores import fitting_cpus, machine_cores

MAX_SEED = 2**31 - 1  # the largest seed a run may have: what its database column holds


def limits() -> dict[str, float]:
    """The operator's limits (MLBENCH_MAX_*): what `check` applies and the form offers."""
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
    return DEFAULTS["task"] if DEFAULTS["task"] in offered else offered[0]


def defaults() -> dict[str, Any]:
    """DEFAULTS on this master: the offered default task, numbers within its limits (a
    copy: a run's algorithm_options never share the table's)."""
    lim = limits()
    table = copy.deepcopy(dict(DEFAULTS, task=default_task()))
    table["num_workers"] = min(table["num_workers"], lim["workers"])
    table["num_cpus"] = default_cpus(table["num_workers"])
    table["max_bandwidth"] = min(table["max_bandwidth"], lim["bandwidth"])
    return table


def default_cpus(num_workers: int) -> float:
    """What a worker of a run of `num_workers` gets for num_cpus left out: the table's
    default within the operator's limit, and on a driver that offers its cores (the local
    one) never more than its share of them (cores.fitting_cpus)."""
    ceiling = min(float(DEFAULTS["num_cpus"]), limits()["cpus"])
    return fitting_cpus(num_workers, ceiling, machine_cores())
