"""A run's training algorithm: one its task admits, with its options typed and completed
(mlbench_worker/shared/algorithm_catalogue.py holds the list, the defaults and the bounds; the
worker checks the same things with the same words).

An outside algorithm is either uploaded (`algorithm_source`: the SHA-256 of a file in the
master's store, runs/algorithm_files.py), whose declared options are checked here exactly
as a built-in's, or installed on the workers and named by its module's dotted path, which
the master cannot read: only the worker can check it, at start-up. Either trains in the
reference loop, so the task must admit algorithms at all; either runs code no catalogue
vouches for, so it is the open division (Run.division: its name is no recipe's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mlbench_master.run_rules.errors import Errors
from mlbench_master.runs import algorithm_files
from mlbench_worker.shared import algorithm_catalogue, algorithm_source, catalogue
from mlbench_worker.shared.algorithm_source import Declaration, DeclarationError

# An installed algorithm: `package.module` (at least one dot), each part an identifier.
INSTALLED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
UPLOAD_HINT = "upload it first (POST /api/algorithms/, or mlbench run --algorithm-file FILE)"


def is_installed(name: str) -> bool:
    """Whether `name` names an installed module (a dot) rather than a catalogue entry."""
    return "." in (name or "")


def _declared(sha: str) -> Declaration | None:
    """The stored file's declaration; None when missing or no longer accepted (check says
    which)."""
    try:
        return algorithm_files.declaration(sha)
    except DeclarationError:
        return None


def _admitted(name: str, info: catalogue.TaskInfo | None) -> bool:
    return name in algorithm_catalogue.ALGORITHMS and info is not None and name in info.algorithms


def fill_algorithm(fields: dict[str, Any], info: catalogue.TaskInfo | None, none: bool,
                   given: frozenset[str] = frozenset()) -> None:  # fmt: skip
    """The algorithm's options completed with its defaults and typed, in place. A measurement
    or a custom command trains with nothing of ours (`none`), so it has no algorithm: stored
    empty. An uploaded algorithm (`algorithm_source`) is named by its file's NAME unless
    the request (or the resumed run: `given`) names it, and its options are completed
    with the declared defaults; an installed one's are kept as given (only the worker
    knows them)."""
    if none:
        fields["algorithm"], fields["algorithm_options"] = "", {}
        fields["algorithm_source"] = ""
        return
    source = fields.get("algorithm_source") or ""
    fields["algorithm_source"] = source
    if source:
        declared = _declared(source)
        if declared is None:
            return  # check_algorithm names algorithm_source
        if "algorithm" not in given:  # the table's default is no choice: the file's NAME
            fields["algorithm"] = declared.name
        if fields["algorithm"] == declared.name and isinstance(fields["algorithm_options"], dict):
            fields["algorithm_options"], _ = algorithm_source.check_options(
                declared, fields["algorithm_options"]
            )
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
        for name in ("algorithm", "algorithm_options", "algorithm_source"):
            if asked.get(name):
                why = ("a custom command trains as it likes" if fields.get("custom_image_command")
                       else f"task {fields['task']} trains nothing")  # fmt: skip
                errors.add(name, f"{why}, so it has no algorithm; leave {name} out")
        return
    name = fields["algorithm"]
    admitted = info.algorithms if info is not None else ()
    if fields.get("algorithm_source") or is_installed(name):
        _check_outside(fields, options, info, errors)
        return
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


def _check_outside(fields: dict[str, Any], options: Any, info: catalogue.TaskInfo | None,
                   errors: Errors) -> None:  # fmt: skip
    """An uploaded algorithm: a stored file, named by its NAME, its options the declared
    ones within their bounds. An installed one: a dotted module path with options of plain
    values (the worker checks them against the module at start-up)."""
    name, sha = fields["algorithm"], fields.get("algorithm_source") or ""
    if info is None or not info.algorithms:
        field = "algorithm_source" if sha else "algorithm"
        errors.add(field, f"task {fields['task']} takes no training algorithm, so it cannot run "
                   "an outside one")  # fmt: skip
        return
    if not isinstance(options, dict):
        errors.add("algorithm_options", "algorithm_options must be an object of option: value")
        return
    if not sha:
        if not INSTALLED.fullmatch(name):
            errors.add("algorithm", f"algorithm {name!r} is no installed module's path "
                       "(package.module, identifiers joined by dots)")  # fmt: skip
        for key, value in options.items():
            if not OPTION_KEY.fullmatch(str(key)) or not _plain(value):
                errors.add("algorithm_options", f"option {str(key)[:64]!r} of {name} must be "
                           "a name with a number or text as its value")  # fmt: skip
        return
    if not algorithm_files.SHA256.fullmatch(sha):
        errors.add("algorithm_source", f"{sha[:80]!r} is not a SHA-256 (64 lower-case hex "
                   "digits, as POST /api/algorithms/ answers)")  # fmt: skip
        return
    try:
        declared = algorithm_files.declaration(sha)
    except DeclarationError as exc:
        errors.add("algorithm_source", f"the stored algorithm {sha[:12]} is refused now: {exc}")
        return
    if declared is None:
        errors.add("algorithm_source", f"no algorithm {sha[:12]}... is stored on this master; "
                   f"{UPLOAD_HINT}")  # fmt: skip
        return
    if name != declared.name:
        errors.add("algorithm", f"algorithm {name!r} is not the NAME algorithm_source "
                   f"{sha[:12]} declares ({declared.name!r}); give {declared.name!r} or leave "
                   "algorithm out")  # fmt: skip
        return
    _, problems = algorithm_source.check_options(declared, options)
    for problem in problems:
        errors.add("algorithm_options", problem)


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def staff_only_algorithm(fields: Mapping[str, Any]) -> str | None:
    """Why only staff may start a run of `fields`' algorithm (None: anyone may). An
    installed module is imported by every rank, whatever it is: a module of the client's
    choice, as a custom command is a command of theirs. An uploaded one was accepted by
    the staff user who uploaded it."""
    if is_installed(fields.get("algorithm") or "") and not fields.get("algorithm_source"):
        return (
            f"algorithm {fields['algorithm']} imports a module of your choice on the workers: "
            "only staff users may name an installed algorithm"
        )
    return None


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
