"""A run's training algorithm: one its task admits, with its options typed and completed
(mlbench_worker/shared/algorithm_catalogue.py holds the list, the defaults and the bounds; the
worker checks the same things with the same words)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import algorithm_catalogue, catalogue


def _admitted(name: str, info: catalogue.TaskInfo | None) -> bool:
    return name in algorithm_catalogue.ALGORITHMS and info is not None and name in info.algorithms


def fill_algorithm(fields: dict[str, Any], info: catalogue.TaskInfo | None, none: bool) -> None:
    """The algorithm's options completed with its defaults and typed, in place. A measurement
    or a custom command trains with nothing of ours (`none`), so it has no algorithm: stored
    empty."""
    if none:
        fields["algorithm"], fields["algorithm_options"] = "", {}
        return
    name, options = fields["algorithm"], fields["algorithm_options"]
    if _admitted(name, info) and isinstance(options, dict):
        fields["algorithm_options"], _ = algorithm_catalogue.check(
            name, options, fields["num_workers"]
        )


def check_algorithm(fields: dict[str, Any], options: Any, asked: Mapping[str, Any],
                    info: catalogue.TaskInfo | None, none: bool, errors: Errors) -> None:  # fmt: skip
    """The algorithm one of the task's, and `options` (as given, before `fill_algorithm`
    completed them) ones it has, within their bounds (algorithm_catalogue says which). A
    run with no algorithm (`none`) refuses one asked for by name."""
    if none:
        for name in ("algorithm", "algorithm_options"):
            if asked.get(name):
                why = ("a custom command trains as it likes" if fields.get("custom_image_command")
                       else f"task {fields['task']} trains nothing")  # fmt: skip
                errors.add(name, f"{why}, so it has no algorithm; leave {name} out")
        return
    name = fields["algorithm"]
    admitted = info.algorithms if info is not None else ()
    if not _admitted(name, info):
        known = "is not known" if name not in algorithm_catalogue.ALGORITHMS else "is not one"
        why = f" ({info.why_not(name)})" if info is not None and info.why_not(name) else ""
        errors.add("algorithm", f"algorithm {name!r} {known} of task {fields['task']}'s{why}: "
                   f"{', '.join(admitted) or 'none'}")  # fmt: skip
        return
    if not isinstance(options, dict):
        errors.add("algorithm_options", "algorithm_options must be an object of option: value")
        return
    _, problems = algorithm_catalogue.check(name, options, fields["num_workers"])
    for problem in problems:
        errors.add("algorithm_options", problem)


def algorithms_served() -> dict[str, Any]:
    """Every algorithm with its options, as GET /api/runs/defaults/ serves them."""
    return {
        a.name: {
            "title": a.title,
            "paper": a.paper,
            "summary": a.summary,
            "implementations": list(a.implementations),  # empty: any that runs it
            "reference": a.reference,
            "recipe": a.recipe,
            "options": [
                {
                    "name": o.name,
                    "type": o.type,
                    "default": o.default,
                    "help": o.help,
                    "bounds": o.bounds(),
                    "choices": list(o.choices),
                }
                for o in a.options
            ],
        }
        for a in algorithm_catalogue.ALGORITHMS.values()
    }
