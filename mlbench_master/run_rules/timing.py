"""A run's time: the budget it trains for (accuracy after time) and the limit that stops
it as FAILED, which must leave TIME_LIMIT_MARGIN beyond the budget.

A run given a limit but no budget trains for its task's budget or for what fits in the
limit, whichever is shorter (`budget_source` says which); only a budget and a limit that
were both given and do not fit are refused (`check_time`). A run given no limit gets its
budget plus the margin (`time_limit_for`). The margin and the shortest limit a budget needs
live with the run defaults (mlbench_master/run_defaults.py), whose model and snapshot
defaults follow from them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mlbench_master.api.models import Run
from mlbench_master.run_defaults import DEFAULTS, TIME_LIMIT_MARGIN, minimum_time_limit
from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue


def task_time_budget(task: str | None) -> float | None:
    """The budget of `task` in the catalogue (the seed's accuracy-after-time rule: 2 hours
    for the training tasks); None for a task it does not know."""
    info = catalogue.TASKS.get(task or DEFAULTS["task"])
    return float(info.time_budget) if info is not None else None


def fitting_budget(time_limit: float) -> float:
    """The longest budget a time limit leaves room for: the limit less TIME_LIMIT_MARGIN,
    or half of it when it is shorter than twice the margin (a short run still trains)."""
    return float(time_limit) - min(TIME_LIMIT_MARGIN, float(time_limit) / 2)


def budget_source(task: str | None, time_budget: float | None, time_limit: float | None,
                  open_division: bool) -> str:  # fmt: skip
    """Where a run's time budget comes from: "asked", "task", "time_limit" or "" (none)."""
    if open_division:
        return ""
    if time_budget is not None:
        return "asked"
    own = task_time_budget(task)
    if own is None:
        return ""
    if time_limit is not None and fitting_budget(time_limit) < own:
        return "time_limit"
    return "task"


def time_budget_for(task: str | None, time_budget: float | None, time_limit: float | None,
                    open_division: bool) -> float | None:  # fmt: skip
    """Seconds of training on the benchmark clock (see budget_source); None for the open
    division, whose command decides itself when it stops."""
    source = budget_source(task, time_budget, time_limit, open_division)
    if source == "asked":
        return float(time_budget)  # type: ignore[arg-type]
    if source == "time_limit":
        return fitting_budget(time_limit)  # type: ignore[arg-type]
    return task_time_budget(task) if source == "task" else None


def effective_time_budget(run: Run) -> float | None:
    """The budget `run`'s worker trains for: as decided when it was created (its manifest's
    config), so a rule changed later never changes a stored run; computed for a run made
    without one (in code)."""
    decided = _decided(run, "effective_time_budget")
    if decided is not _UNKNOWN:
        return decided
    return time_budget_for(run.task, run.time_budget, run.time_limit, run.open_division)


def time_budget_source(run: Run) -> str:
    """Where `run`'s budget comes from (budget_source), as decided when it was created."""
    decided = _decided(run, "time_budget_source")
    if decided is not _UNKNOWN:
        return decided
    return budget_source(run.task, run.time_budget, run.time_limit, run.open_division)


_UNKNOWN = object()


def _decided(run: Run, key: str) -> Any:
    config = run.manifest.get("config") if isinstance(run.manifest, dict) else None
    return config.get(key, _UNKNOWN) if isinstance(config, dict) else _UNKNOWN


def default_time_limit(time_budget: float | None) -> int:
    """The limit of a run that gives none: its budget plus the margin (a shorter one would
    fail a run that should end FINISHED; a longer one only keeps a hung run's workers busy);
    without a budget (the open division), the operator's MLBENCH_DEFAULT_TIME_LIMIT."""
    minimum = minimum_time_limit(time_budget)
    return minimum if minimum is not None else int(settings.MLBENCH_DEFAULT_TIME_LIMIT)


def _budget_to_fit(fields: dict[str, Any], budget_asked: bool) -> float | None:
    """The budget the limit must leave room for: the one asked for, else the task's (None
    for a task this master does not know: refused by its name)."""
    return fields["time_budget"] if budget_asked else task_time_budget(fields["task"])


def check_time(fields: dict[str, Any], budget_asked: bool, limit_asked: bool, high: int,
               errors: Errors) -> None:  # fmt: skip
    """A budget only for reference tasks, and a limit that leaves it room: asked for, or the
    one `time_limit_for` will derive, within the operator's MLBENCH_MAX_TIME_LIMIT (`high`)."""
    if fields.get("custom_image_command"):
        if budget_asked:
            errors.add("time_budget", "time_budget applies to reference tasks: a custom command "
                       "decides itself when it stops (give time_limit to bound it)")  # fmt: skip
        return
    if not budget_asked and limit_asked:
        return  # the task's budget, or what fits in the limit: it fits by construction
    budget = _budget_to_fit(fields, budget_asked)
    if budget is None:
        return
    needed = minimum_time_limit(budget)
    whose = "" if budget_asked else " (the task's, as none was given)"
    if not limit_asked:
        if needed > high:
            errors.add("time_budget", f"time_budget {budget:g} s{whose} needs a time limit of at "
                       f"least {needed} s (budget + {TIME_LIMIT_MARGIN} s for start-up and the "
                       f"final evaluation), more than this master allows (MLBENCH_MAX_TIME_LIMIT"
                       f"={high}); give a shorter time_budget, or a time_limit to train for what "
                       "fits in it")  # fmt: skip
    elif fields["time_limit"] < needed:
        message = (
            f"time_limit ({fields['time_limit']} s) must be at least time_budget {budget:g} s + "
            f"{TIME_LIMIT_MARGIN} s for start-up and the final evaluation = {needed} s: the "
            "time limit stops the run as FAILED; give a longer time_limit, a shorter "
            "time_budget, or leave one of them out"
        )
        errors.add("time_limit", message)
        errors.add("time_budget", message)


def time_limit_for(fields: dict[str, Any], budget_asked: bool, limit_asked: bool) -> int | None:
    """The run's time limit: the one asked for; else its budget plus the margin; for the open
    division, which has no budget, the operator's MLBENCH_DEFAULT_TIME_LIMIT."""
    if fields.get("custom_image_command"):
        return fields["time_limit"] or default_time_limit(None)
    if limit_asked:
        return fields["time_limit"]
    return minimum_time_limit(_budget_to_fit(fields, budget_asked))
