# Over 400 lines: every rule about a run's fields is here on purpose (issue 20: one home).
"""The rules of a run: what a request may ask for, what it gets for what it leaves out, and
what follows from it (its time budget and limit, the checkpoint it resumes, its set-up).

Why one module: the API, the dashboard's form, the `mlbench` command and the client each
carried defaults and checks of their own, and the same benchmark started two ways was not
the same run. Now serializers only parse, views only route, runs.py stores what `resolve`
returns, and the form and the clients read the same table (`served`, GET
/api/runs/defaults/). A new dimension of a run (an algorithm, an implementation) adds its
default to DEFAULTS, its check to `resolve` and its name to SETUP_FIELDS, nowhere else.

The time rules: a reference run trains for its time budget (accuracy after time), and its
time limit (the hard stop that makes it FAILED) leaves TIME_LIMIT_MARGIN beyond the budget
for start-up and the final evaluation. A run given a limit but no budget trains for its
task's budget or for what fits in the limit, whichever is shorter (`budget_source` says
which); only a budget and a limit that were both given and do not fit are refused.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from mlbench_master.api.models import Metric, Run
from mlbench_master.cluster.base import ClusterError
from mlbench_worker import catalogue

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
}
# Seconds a run's time limit must leave beyond its time budget, for what the budget does not
# count: start-up before the benchmark clock starts (mpirun, imports, getting the data: a
# first CIFAR-10 download, or converting epsilon from its .bz2 files, about 9 minutes here)
# and the evaluation of the final model. A limit shorter than twice the margin keeps half.
TIME_LIMIT_MARGIN = 900
# What a new run may continue from: a run that ended before it could finish.
RESUMABLE_STATES = (Run.FAILED, Run.CANCELLED)
# The point rank 0 posts after each checkpoint (mlbench_worker/checkpoint.py): value =
# completed epochs; metadata = epoch, step, elapsed and the checkpoint's identity. The master
# never reads the file (it may live in a worker pod): this is how it knows what one holds.
CHECKPOINT_METRIC = "checkpoint"
# The fields a resumed run takes from its parent when its request leaves them out.
INHERITED = (
    "task", "num_workers", "num_cpus", "max_bandwidth", "latency", "backend", "gpu_enabled",
    "light_target", "target", "dataset", "max_epochs", "image", "run_all_nodes",
)  # fmt: skip
# What must be equal for two runs' results to be compared (the comparison rule reads these
# and the number of workers): recorded in every manifest as `setup`.
SETUP_FIELDS = (
    "task", "dataset", "target", "backend", "num_cpus", "gpu_enabled", "max_bandwidth",
    "latency", "custom_image_command",
)  # fmt: skip
STAFF_ONLY = {
    "custom_image_command": "runs code of your choice on the workers",
    "custom_image_name": "runs its own entry point in the worker pods",
}
CUSTOM_IMAGE = catalogue.CUSTOM_IMAGE
CUSTOM_BACKEND = catalogue.CUSTOM_BACKEND
CUSTOM_BACKEND_STORED = "custom"  # Run.backend of a run whose command picks its backend
CUSTOM_FIELDS = ("custom_image_name", "custom_image_command", "custom_backend")
LOCAL_IMAGE_REFUSED = (
    "the local cluster runs commands as processes on this machine, not containers, so it "
    "cannot run an image; leave custom_image_name empty and give custom_image_command "
    "(it runs here as is), or use a Kubernetes master"
)


class RunRefused(ValueError):
    """The request breaks a rule (the API answers 400 with `errors`: field -> messages)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{f}: {m[0]}" for f, m in errors.items()))


class StaffOnly(PermissionError):
    """A field only staff users may set (the API answers 403)."""


class ResumeRefused(ValueError):
    """The checkpoint asked for cannot be continued (400 naming `resume_from`)."""


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
    table = dict(DEFAULTS, task=default_task())
    table["num_workers"] = min(table["num_workers"], lim["workers"])
    table["num_cpus"] = min(table["num_cpus"], lim["cpus"])
    table["max_bandwidth"] = min(table["max_bandwidth"], lim["bandwidth"])
    return table


def served() -> dict[str, Any]:
    """What GET /api/runs/defaults/ answers: the table, the limits and, per offered task,
    what a run of it gets without options (backend, goal, time budget and limit)."""
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
        }
    return {
        "defaults": defaults(),
        "limits": limits(),
        "time_limit_margin": TIME_LIMIT_MARGIN,
        "open_division_time_limit": default_time_limit(None),
        "tasks": tasks,
    }


# --- time -------------------------------------------------------------------------------


def task_time_budget(task: str | None) -> float | None:
    """The budget of `task` in the catalogue (the seed's accuracy-after-time rule: 2 hours
    for the training tasks); None for a task it does not know."""
    info = catalogue.TASKS.get(task or catalogue.DEFAULT_TASK)
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
    """The budget `run`'s worker trains for."""
    return time_budget_for(run.task, run.time_budget, run.time_limit, run.open_division)


def minimum_time_limit(time_budget: float | None) -> int | None:
    """The shortest time limit a run with this budget may have (None: no budget, no rule)."""
    return None if time_budget is None else math.ceil(time_budget) + TIME_LIMIT_MARGIN


def default_time_limit(time_budget: float | None) -> int:
    """The limit of a run that gives none: its budget plus the margin (a shorter one would
    fail a run that should end FINISHED; a longer one only keeps a hung run's workers busy);
    without a budget (the open division), the operator's MLBENCH_DEFAULT_TIME_LIMIT."""
    minimum = minimum_time_limit(time_budget)
    return minimum if minimum is not None else int(settings.MLBENCH_DEFAULT_TIME_LIMIT)


# --- resolving a request ------------------------------------------------------------------


class _Errors(dict):
    def add(self, field: str, message: str) -> None:
        self.setdefault(field, []).append(message)


def resolve(request: Mapping[str, Any], user: Any = None) -> dict[str, Any]:
    """The fields of a new Run from what a client asked for (None: not given).

    Fields left out come from the parent run when resuming, else from `defaults`; the time
    limit, the goal of `light_target` and a measurement's backends are derived. Raises
    RunRefused with every broken rule, then StaffOnly for a field only staff may set.
    """
    errors = _Errors()
    asked = {k: v for k, v in request.items() if v is not None}
    parent_id = asked.get("resume_from")
    fields = dict(asked)
    if parent_id is not None:
        for name, value in _parent_fields(parent_id, asked).items():
            fields.setdefault(name, value)
    _resolve_image_and_backend(fields, errors)
    _check_ranges(fields, errors)
    budget_asked, limit_asked = "time_budget" in fields, "time_limit" in fields
    table = defaults()
    info = catalogue.TASKS.get(fields.get("task") or table["task"])
    measurement = info is not None and info.measurement and not fields.get("custom_image_command")
    if info is not None and not measurement:
        fields.setdefault("target", info.default_goal)
    for name, value in table.items():
        if not (measurement and name == "backend"):
            fields.setdefault(name, value)
    if fields["gpu_enabled"] and limits()["gpus"] < 1:
        errors.add("gpu_enabled", "this cluster offers no GPUs (MLBENCH_MAX_GPUS=0); set "
                   "gpu_enabled to false")  # fmt: skip
    if fields.get("backend") == "nccl" and not fields["gpu_enabled"]:
        errors.add("backend", "the nccl backend needs GPUs: set gpu_enabled to true or use mpi "
                   "or gloo")  # fmt: skip
    if fields["light_target"] and "target" in asked and asked["target"] != "light":
        errors.add("target", "light_target=true asks for target 'light'; do not also give "
                   "another target")  # fmt: skip
    if measurement:
        _check_measurement(fields, asked, info, errors)
    elif info is not None and "image_name" not in errors:
        _check_goal_and_data(fields, info, errors)
    _resolve_time(fields, budget_asked, limit_asked, errors)
    if parent_id is not None and not errors:
        _check_resume(fields, errors)
    if errors:
        for name, messages in errors.items():
            if parent_id is not None and name in INHERITED and name not in asked:
                errors[name] = [f"{m} (the value of run {parent_id}, which this run resumes: "
                                f"give {name} to change it)" for m in messages]  # fmt: skip
        raise RunRefused(dict(errors))
    for name, why in STAFF_ONLY.items():
        if fields.get(name) and not getattr(user, "is_staff", False):
            raise StaffOnly(f"{name} {why}: only staff users may set it")
    if fields["light_target"]:
        fields["target"] = "light"
    return fields


def _parent_fields(parent_id: int, asked: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed run takes from its parent: every INHERITED field, and its time budget
    and limit as a pair unless the request gives either (then they are derived anew)."""
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None:
        return {}  # said by _check_resume
    taken = {name: getattr(parent, name) for name in INHERITED}
    if "time_budget" not in asked and "time_limit" not in asked:
        taken.update(time_budget=parent.time_budget, time_limit=parent.time_limit)
    return {k: v for k, v in taken.items() if v not in (None, "")}


def _range(field: str, low: str, high: str, setting: str | None) -> str:
    limit = f" (limit {setting})" if setting else ""
    return f"{field} must be between {low} and {high}{limit}"


def _check_ranges(fields: dict[str, Any], errors: _Errors) -> None:
    """Each given number within the operator's limits, each name one this master knows."""
    lim = limits()
    workers = fields.get("num_workers")
    if workers is not None:
        if not 1 <= workers <= lim["workers"]:
            errors.add("num_workers", _range("num_workers", "1", str(lim["workers"]),
                                             "MLBENCH_MAX_WORKERS"))  # fmt: skip
        else:
            _check_cluster_room(workers, errors)
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
    }  # fmt: skip
    for name, (ok, message) in checks.items():
        if name in fields and not ok(fields[name]):
            errors.add(name, message)
    if fields.get("latency") == 0:
        del fields["latency"]  # 0 ms: no delay, stored as none
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


def _check_cluster_room(workers: int, errors: _Errors) -> None:
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


def _measured_backends(gpu: bool) -> str:
    return "mpi,gloo,nccl" if gpu else "mpi,gloo"


def _check_measurement(fields: dict[str, Any], asked: Mapping[str, Any],
                       info: catalogue.TaskInfo, errors: _Errors) -> None:  # fmt: skip
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


def _check_goal_and_data(fields: dict[str, Any], info: catalogue.TaskInfo,
                         errors: _Errors) -> None:  # fmt: skip
    """Each task has its own goals and data sets (the catalogue says which)."""
    target = "light" if fields["light_target"] else fields["target"]
    if target not in info.goals:
        errors.add("target", f"task {info.name} has no goal {target!r}; its goals: "
                   f"{', '.join(info.goals)}")  # fmt: skip
    if fields["dataset"] not in info.datasets:
        errors.add("dataset", f"task {info.name} runs on {', '.join(info.datasets)}, not "
                   f"{fields['dataset']!r}")  # fmt: skip


def _resolve_time(fields: dict[str, Any], budget_asked: bool, limit_asked: bool,
                  errors: _Errors) -> None:  # fmt: skip
    """Check the budget against the limit and set the limit when none was given."""
    open_division = bool(fields.get("custom_image_command"))
    if open_division and budget_asked:
        errors.add("time_budget", "time_budget applies to reference tasks: a custom command "
                   "decides itself when it stops (give time_limit to bound it)")  # fmt: skip
        return
    if open_division:
        fields["time_limit"] = fields["time_limit"] or default_time_limit(None)
        return
    if not budget_asked and limit_asked:
        return  # the task's budget, or what fits in the limit: it fits by construction
    budget = fields["time_budget"] if budget_asked else task_time_budget(fields["task"])
    if budget is None:  # a task this master does not know: said by _check_ranges
        return
    needed, high = minimum_time_limit(budget), limits()["time_limit"]
    whose = "" if budget_asked else " (the task's, as none was given)"
    if not limit_asked:
        fields["time_limit"] = needed
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


def _check_resume(fields: dict[str, Any], errors: _Errors) -> None:
    if fields.get("custom_image_command"):
        errors.add("resume_from", "a custom command cannot resume a checkpoint: resume_from is "
                   "for reference tasks")  # fmt: skip
        return
    try:
        resume_point(fields["resume_from"], task=fields["task"],
                     num_workers=fields["num_workers"], dataset=fields["dataset"])  # fmt: skip
    except ResumeRefused as exc:
        errors.add("resume_from", str(exc))


def _resolve_image_and_backend(fields: dict[str, Any], errors: _Errors) -> None:
    """Resolve `image`/`image_name`, the custom fields and the backend, in place.

    An official image of the original platform stands for the task that implements it here
    (the catalogue maps them, tag ignored). "custom_image" (or any custom field) is the open
    division: the user's command, and on Kubernetes their image. The two never mix: a
    reference task's result must come from the reference code, so custom fields with an
    official image are refused, and every open-division run names its command (an image
    alone would run the reference worker in the user's image). A custom backend only means
    something to the user's own code. Backends in any case ("MPI" is the original client's).
    """
    backend = fields.get("backend")
    if backend is not None:
        backend = fields["backend"] = backend.strip().lower()
        if backend not in Run.BACKENDS and backend != CUSTOM_BACKEND:
            errors.add("backend", f"backend {backend!r} is not one of {', '.join(Run.BACKENDS)} "
                       f"(any case), or {CUSTOM_BACKEND!r} with custom_backend for a custom "
                       "image")  # fmt: skip
    image, alias = fields.pop("image", None), fields.pop("image_name", None)
    if image and alias and image.strip() != alias.strip():
        errors.add("image_name", f"image ({image!r}) and image_name ({alias!r}) name different "
                   "images; give one")  # fmt: skip
        return
    image = (alias or image or "").strip()
    custom = [f for f in CUSTOM_FIELDS if fields.get(f)] + (
        ["backend"] if backend == CUSTOM_BACKEND else []
    )
    if image and image != CUSTOM_IMAGE:
        _official_image(image, custom, fields, errors)
        return
    if image == CUSTOM_IMAGE:
        fields["image"] = CUSTOM_IMAGE
    if (image == CUSTOM_IMAGE or custom) and not fields.get("custom_image_command"):
        errors.add("custom_image_command", "the open division needs custom_image_command: the "
                   "command each worker runs")  # fmt: skip
    if fields.get("custom_image_name") and settings.MLBENCH_CLUSTER == "local":
        errors.add("custom_image_name", LOCAL_IMAGE_REFUSED)
    named = fields.get("custom_backend")
    if backend == CUSTOM_BACKEND and not named:
        errors.add("custom_backend", f"backend {CUSTOM_BACKEND!r} needs custom_backend: the "
                   "backend's name")  # fmt: skip
    elif named and backend not in (None, CUSTOM_BACKEND):
        errors.add("backend", f"custom_backend {named!r} and backend {backend!r} disagree: set "
                   f"backend to {CUSTOM_BACKEND!r} or leave it out")  # fmt: skip
    elif named:
        fields["backend"] = CUSTOM_BACKEND_STORED


def _official_image(image: str, custom: list[str], fields: dict[str, Any],
                    errors: _Errors) -> None:  # fmt: skip
    fields["image"] = image
    offered = list(settings.MLBENCH_TASKS)
    implemented = ", ".join(catalogue.implemented_images(offered))
    found = catalogue.seed_image(image)
    if found is None:
        errors.add("image_name", f"{image!r} is not an official mlbench image; this master runs "
                   f"{implemented}, or {CUSTOM_IMAGE!r} with custom_image_command for your own "
                   "code")  # fmt: skip
    elif found.task is None or found.task not in offered:
        errors.add("image_name", f"{found.title} ({found.image}) is not implemented on this "
                   f"master yet; it runs {implemented}")  # fmt: skip
    elif custom:
        errors.add(custom[0], f"{custom[0]} is for the open division (image_name "
                   f"{CUSTOM_IMAGE!r}); image_name {image!r} runs the reference task "
                   f"{found.task}")  # fmt: skip
    else:
        if fields.get("task") not in (None, found.task):
            errors.add("task", f"image_name {image!r} runs task {found.task}, not "
                       f"{fields['task']!r}; give one")  # fmt: skip
        fields["task"] = found.task


# --- resuming -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: the parent's last checkpoint, as its worker recorded it."""

    run_id: int
    epoch: int  # epochs completed when the checkpoint was written
    step: int
    elapsed: float  # seconds on the benchmark clock, which the new run continues
    identity: dict[str, Any]  # task, model, num_workers, batch_size, seed, dataset

    def record(self) -> dict[str, Any]:
        """The manifest's `resumed_from`."""
        return {"run_id": self.run_id, "epoch": self.epoch, "step": self.step,
                "elapsed": self.elapsed, "checkpoint": dict(self.identity)}  # fmt: skip


def resume_point(
    parent_id: int, *, task: str | None, num_workers: int, dataset: str | None
) -> ResumePoint:
    """The checkpoint of run `parent_id` that a new run with this set-up would continue.

    Refused (ResumeRefused) when the run does not exist, did not end FAILED or CANCELLED, ran
    a custom command, wrote no checkpoint, or differs from the new run in what the worker's
    identity check (mlbench_worker/checkpoint.py) refuses: the task (and with it the model
    and the batch size per worker), the number of workers, the data set. Checking here
    answers 400 at once instead of a run that fails when its worker starts.
    """
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None:
        raise ResumeRefused(f"there is no run {parent_id}")
    if parent.state not in RESUMABLE_STATES:
        raise ResumeRefused(
            f"run {parent_id} is {parent.state}; only a FAILED or CANCELLED run can be resumed"
        )
    if parent.open_division:
        raise ResumeRefused(
            f"run {parent_id} ran a custom command (open division): the platform keeps "
            "checkpoints of reference-task runs only"
        )
    point = (
        Metric.objects.filter(run_id=parent.pk, name=CHECKPOINT_METRIC)
        .order_by("-date", "-pk")
        .first()
    )
    meta = point.metadata if point is not None and isinstance(point.metadata, dict) else None
    identity = meta.get("identity") if meta else None
    if not isinstance(identity, dict):
        earlier = (
            f"; it started from run {parent.resumed_from}'s checkpoint: resume run "
            f"{parent.resumed_from} instead"
            if parent.resumed_from is not None
            else ""
        )
        raise ResumeRefused(
            f"run {parent_id} wrote no checkpoint (a checkpoint is written at the end of each "
            f"epoch; it stopped before its first one ended){earlier}"
        )
    info = catalogue.TASKS.get(task or catalogue.DEFAULT_TASK)
    wanted: dict[str, Any] = {"task": task or catalogue.DEFAULT_TASK, "num_workers": num_workers}
    if info is not None:
        wanted.update(model=info.model, batch_size=info.batch_size)
    if dataset not in (None, "auto"):
        wanted["dataset"] = dataset
    for key, value in wanted.items():
        if identity.get(key) != value:
            raise ResumeRefused(
                f"run {parent_id}'s checkpoint is for {key} {identity.get(key)!r}, this run's "
                f"{key} is {value!r}; a checkpoint only continues the same experiment: "
                f"resume with {key} {identity.get(key)!r} or start a fresh run"
            )
    return ResumePoint(
        run_id=parent.pk,
        epoch=int(meta.get("epoch") or point.value),
        step=int(meta.get("step") or 0),
        elapsed=float(meta.get("elapsed") or 0.0),
        identity=identity,
    )


def setup_of(run: Run) -> dict[str, Any]:
    """The comparability inputs of `run` (SETUP_FIELDS), as its manifest records them."""
    return {name: getattr(run, name) for name in SETUP_FIELDS}
