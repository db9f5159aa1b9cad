"""Step 3 of `resolve`: derive. What follows from a request's fields once they are filled
and checked: the goal (`light_target` is target "light"; a measurement has none) and the
time limit (timing.py: the budget plus its margin when none was given).

The rest of what follows is derived from the stored run, where the manifest records it
once (manifest.py): the time budget the worker trains for and where it comes from
(`time_budget_for`, `budget_source`) and the run's set-up (`setup_of`).
"""

from __future__ import annotations

from typing import Any

from mlbench_master.run_rules.fill import Filled
from mlbench_master.run_rules.timing import time_limit_for


def derive(run: Filled) -> dict[str, Any]:
    """The fields of the new run: `run`'s, with its goal and time limit decided."""
    fields = dict(run.fields)
    if run.measurement:
        fields["target"] = ""
    if fields["light_target"]:
        fields["target"] = "light"
    fields["time_limit"] = time_limit_for(
        fields, "time_budget" in run.given, "time_limit" in run.given
    )
    return fields
