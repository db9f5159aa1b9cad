"""The task catalogue as the dashboard's JavaScript reads it.

Why: the pages draw throughput charts, results tables and goals for every task, and each
task counts something different per second (task 1a images, task 2 samples). The catalogue
(mlbench_worker/shared/catalogue.py) is the only list of tasks, so the page templates embed the few
facts the scripts need from it (`json_script`, read by static/dashboard/js/tasks.js) rather
than the scripts assuming images or keeping a list of their own. Every task of the catalogue
is given, not only MLBENCH_TASKS: runs of a task the operator no longer offers still exist.

Plain data without Django, so tests/rules can hand the same JSON to the JavaScript rules.
"""

from __future__ import annotations

from typing import Any

from mlbench_worker.shared import catalogue


def task_catalogue() -> dict[str, dict[str, Any]]:
    """{task name: its kind, whether it is a measurement, title, data set, throughput metric
    and unit, default goal, goals}.

    `kind` tells the pages which view a run gets: "training" (curves against the clock,
    accuracy goals) or "measurement" (the backend benchmark: bandwidth per message
    size, see static/dashboard/js/backend_benchmark.js), which the scripts read as the
    catalogue's own `measurement` rather than comparing names."""
    return {
        info.name: {
            "kind": info.kind,
            "measurement": info.measurement,
            "title": info.title,
            "dataset": info.dataset,
            "throughput_metric": info.throughput_metric,
            "throughput_unit": info.throughput_unit,
            "default_goal": info.default_goal,
            "goals": {
                name: {"metric": goal.metric, "value": goal.value, "direction": goal.direction}
                for name, goal in info.goals.items()
            },
        }
        for info in catalogue.TASKS.values()
    }
