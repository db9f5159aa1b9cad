# Over 400 lines: one field per option of POST /api/runs/ and /api/series/, each with its help.
"""The "New run" form: one field per option POST /api/runs/ takes, with the operator's limits
and the run defaults (both from mlbench_master/run_rules/, the table GET
/api/runs/defaults/ serves), so a run started from the form without changing anything is the
run the API, the CLI and the client start without options.

The browser enforces the limits with min/max attributes so a user cannot type more than the
cluster allows; the API enforces them again and its 400 messages are shown on the fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_worker.shared import catalogue


@dataclass
class Field:
    name: str
    label: str
    widget: str  # text | number | select | checkbox | textarea
    default: Any = ""
    help: str = ""
    required: bool = False
    min: float | None = None
    max: float | None = None
    step: float | str | None = None
    choices: list[tuple[str, str]] = field(default_factory=list)
    group: str = "basic"  # basic | benchmark | advanced
    disabled: bool = False
    algorithm: str = ""  # an option of this algorithm: shown only while it is chosen
    disabled_choices: list[str] = field(default_factory=list)  # shown, cannot be chosen


def _algorithm_fields(served: dict[str, Any]) -> list[Field]:
    """The algorithm select, then one field per option of each algorithm, named
    algorithm_options.<algorithm>.<option> (runs.js sends the chosen one's as the
    `algorithm_options` object), with the catalogue's default, bounds and help."""
    algorithms = served["algorithms"]
    chosen = served["defaults"]["algorithm"]
    fields = [
        Field(
            "algorithm",
            "Algorithm",
            "select",
            chosen,
            "How the workers combine their work; the task's list. "
            + " ".join(f"{name}: {a['summary']}." for name, a in algorithms.items()),
            choices=[(name, f"{a['title']} ({name})") for name, a in algorithms.items()],
            group="benchmark",
        )
    ]
    for name, info in algorithms.items():
        for option in info["options"]:
            numeric = option["type"] in ("int", "float")
            fields.append(
                Field(
                    f"algorithm_options.{name}.{option['name']}",
                    f"{option['name'].capitalize()} ({name})",
                    "number" if numeric else "select",
                    option["default"],
                    f"{option['help']}: {option['bounds']} (default {option['default']}).",
                    step=(1 if option["type"] == "int" else "any") if numeric else None,
                    choices=_choices(option["choices"]),
                    group="benchmark",
                    algorithm=name,
                    disabled=name != chosen,
                )
            )
    return fields


def _implementation_field(served: dict[str, Any]) -> Field:
    """The implementation select: every implementation with its title, the one the table
    gives by default chosen. runs.js offers only the chosen task's (served
    `tasks[T].implementations`) and limits the algorithm and backend choices to what the
    chosen one runs. One whose framework the workers cannot import is shown but cannot be
    chosen, its option saying how to install it: the API would refuse it."""
    implementations = served["implementations"]
    missing = [name for name, i in implementations.items() if i["available"] is False]
    help_text = "Which code trains the run; the task's list. " + " ".join(
        f"{name}: {i['summary']}." for name, i in implementations.items()
    )
    for name in missing:
        help_text += f" {name} cannot run on these workers: {implementations[name]['install']}."
    return Field(
        "implementation",
        "Implementation",
        "select",
        served["defaults"]["implementation"],
        help_text,
        choices=[
            (
                name,
                f"{i['title']} ({name})"
                + (f": not installed ({i['install']})" if name in missing else ""),
            )
            for name, i in implementations.items()
        ],
        group="benchmark",
        disabled_choices=missing,
    )


def _lr_schedule_field(served: dict[str, Any]) -> Field:
    """The learning-rate schedule select: empty (the task's default) or one of the
    schedules of the tasks that have any (served `lr_schedules`); the API refuses one for
    another task, naming the tasks that take it."""
    offered = served["lr_schedules"]
    names = list(dict.fromkeys(s for schedules in offered.values() for s in schedules))
    tasks = ", ".join(offered) or "none offered here"
    return Field(
        "lr_schedule",
        "Learning-rate schedule",
        "select",
        served["defaults"]["lr_schedule"],
        f"Only for tasks with a choice ({tasks}): after the warm-up, step divides the rate "
        "by 10 at epochs 30, 60 and 80, cosine lowers it to zero at the last epoch, poly is "
        "MLPerf's closed ResNet schedule (the run's MLPerf log then passes the closed "
        "rules). Empty: the task's default (step).",
        choices=[("", "task default"), *_choices(names)],
        group="benchmark",
    )


def cluster_name() -> str:
    """Which driver runs the workers (MLBENCH_CLUSTER: local, kubernetes or slurm): what the
    open division's fields do differs between them, and the form says which applies."""
    cluster = settings.MLBENCH_CLUSTER
    return cluster if cluster in _COMMAND_HELP else "local"


# What the open division's fields do on each cluster, said where they are filled in: on the
# local cluster the ranks are plain processes (no containers, so no image can be run and the
# API refuses custom_image_name); on Kubernetes the run's worker pods use the custom image.
_IMAGE_REASON = {
    "local": (
        "Not available on this cluster (local): the workers are processes on this machine, "
        "with no containers to run an image in. A custom command runs without one."
    ),
    "slurm": (
        "Not available on this cluster (Slurm): the ranks run in the nodes' shared Python "
        "environment, with no containers to run an image in. A custom command runs without one."
    ),
}
_KUBERNETES_IMAGE_HELP = (
    "Open division: the worker pods run this image for this run instead of the installed "
    "worker image; the custom command runs in it."
)
_RANKS = "on rank 0 only, or on every rank with “Run on all nodes”"
_COMMAND_HELP = {
    "local": (
        f"Open division (staff only): runs under mpirun on this machine instead of the "
        f"reference worker, {_RANKS}. Each rank starts in a folder of its own under "
        f"MLBENCH_HOME/local-cluster: give absolute paths."
    ),
    "kubernetes": (
        f"Open division (staff only): runs under mpirun in the worker pods (in the custom "
        f"image when one is given) instead of the reference worker, {_RANKS}."
    ),
    "slurm": (
        f"Open division (staff only): runs in the run's Slurm job on its nodes (started by "
        f"mpirun, or srun with MLBENCH_SLURM_LAUNCHER=srun) instead of the reference worker, "
        f"{_RANKS}. Each rank starts in the job's "
        f"folder on the shared filesystem (MLBENCH_SLURM_DIR): give absolute paths."
    ),
}


def _custom_image(cluster: str) -> Field:
    """Disabled on a cluster without containers (local, Slurm), with the reason as its
    help: a field the API refuses there should not look fillable."""
    if cluster in _IMAGE_REASON:
        return Field(
            "custom_image_name",
            "Custom image",
            "text",
            help=_IMAGE_REASON[cluster],
            group="advanced",
            disabled=True,
        )
    return Field(
        "custom_image_name", "Custom image", "text", help=_KUBERNETES_IMAGE_HELP, group="advanced"
    )


def _task_budgets(served: dict[str, Any]) -> str:
    """The budgets a run gets without one, said once when every task has the same."""
    budgets = {name: task["time_budget"] for name, task in served["tasks"].items()}
    if len(set(budgets.values())) == 1:
        return f"the task's own budget ({next(iter(budgets.values())):g} s)"
    return "the task's own budget (" + ", ".join(f"{n}: {b:g} s" for n, b in budgets.items()) + ")"


def _choices(values: list[str]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _series_fields(default: dict[str, Any]) -> list[Field]:
    """Seeds, repeats and worker counts: one of each is one run; several make a series
    (POST /api/series/), its runs queued one after another."""
    most = int(settings.MLBENCH_SERIES_MAX_RUNS)
    return [
        Field(
            "seeds",
            "Seeds",
            "text",
            "",
            f"The seed every rank starts from (empty: "
            f"{default['seed']}). Several, e.g. 1,2,3, make a series: one run per seed.",
            group="series",
        ),  # fmt: skip
        Field(
            "repeats",
            "Repeats",
            "number",
            "",
            "Instead of seeds: N runs, seeds 1 to N.",
            min=1,
            max=most,
            step=1,
            group="series",
        ),  # fmt: skip
        Field(
            "workers",
            "Worker counts",
            "text",
            "",
            "Several, e.g. 1,2,4, make a series over "
            "them (instead of Workers above), for the speed-up.",
            group="series",
        ),  # fmt: skip
        Field(
            "queue",
            "Queue behind the active run",
            "checkbox",
            False,
            "Wait in the "
            "master's queue while another run is active instead of being refused; a series "
            f"always queues (at most {most} runs in one).",
            group="series",
        ),  # fmt: skip
    ]


def run_form_spec() -> dict[str, Any]:
    served = run_rules.served()
    lim, default = served["limits"], served["defaults"]
    cluster = cluster_name()
    tasks = [catalogue.get(name) for name in settings.MLBENCH_TASKS]
    real_sets = ", ".join(dict.fromkeys(t.dataset for t in tasks))
    fields = [
        Field("name", "Run name", "text", required=True, help="A name to find the run by."),
        Field(
            "task",
            "Benchmark task",
            "select",
            default["task"],
            choices=[(t.name, f"{t.title} ({t.name})") for t in tasks],
        ),
        Field(
            "num_workers",
            "Workers",
            "number",
            default["num_workers"],
            f"Number of worker ranks (at most {lim['workers']}).",
            required=True,
            min=1,
            max=lim["workers"],
            step=1,
        ),
        Field(
            "num_cpus",
            "CPUs per worker",
            "number",
            default["num_cpus"],
            f"Cores each worker may use (at most {lim['cpus']:g}).",
            required=True,
            min=0.1,
            max=lim["cpus"],
            step="any",
        ),
        Field(
            "max_bandwidth",
            "Bandwidth (Mbit/s)",
            "number",
            default["max_bandwidth"],
            f"Network limit per worker (at most {lim['bandwidth']}).",
            min=1,
            max=lim["bandwidth"],
            step=1,
        ),
        Field(
            "latency",
            "Latency (ms)",
            "number",
            "",
            f"Delay added each way on every worker's link (at most {lim['latency']:g}; empty: "
            "none).",
            min=0,
            max=lim["latency"],
            step="any",
        ),
        Field(
            "gpu_enabled",
            "Use GPUs",
            "checkbox",
            default["gpu_enabled"],
            "No GPUs are available on this cluster." if lim["gpus"] < 1 else "One GPU per worker.",
            disabled=lim["gpus"] < 1,
        ),
        _implementation_field(served),
        _lr_schedule_field(served),
        *_algorithm_fields(served),
        Field(
            "backend",
            "Communication backend",
            "select",
            default["backend"],
            "mpi (mpi4py), gloo, or nccl (GPUs). The reference implementation runs on each, "
            "torch-ddp on gloo or nccl; tensorflow, spark and flink use their own exchange "
            "(no backend).",
            choices=_choices(Run.BACKENDS),
            group="benchmark",
        ),
        Field(
            "target",
            "Accuracy target",
            "select",
            served["tasks"][default["task"]]["target"] or default["target"],
            choices=_choices(catalogue.goal_names()),
            group="benchmark",
        ),
        Field(
            "light_target",
            "Light target (quick check)",
            "checkbox",
            default["light_target"],
            "Stop at the light target instead of the chosen one.",
            group="benchmark",
        ),
        Field(
            "dataset",
            "Dataset",
            "select",
            default["dataset"],
            f"auto uses the task's real data set ({real_sets}) when it can be had, else a "
            "synthetic set (shown as such).",
            choices=_choices(catalogue.dataset_names()),
            group="benchmark",
        ),
        Field(
            "time_budget",
            "Time budget (s)",
            "number",
            None,
            "Accuracy after time: training stops after this many seconds on the benchmark "
            f"clock and the final model is evaluated. Empty: {_task_budgets(served)}, or what "
            "fits in the time limit when one is given and that is shorter. Not for a custom "
            "command.",
            min=1,
            step="any",
            group="benchmark",
        ),
        Field(
            "max_epochs",
            "Max epochs",
            "number",
            None,
            "Empty: the task's own number.",
            min=1,
            step=1,
            group="benchmark",
        ),
        Field(
            "test_examples",
            "Test examples",
            "number",
            None,
            "Grade the run on the first N test examples (task 3: validation tokens), fixed "
            "now. Empty: the whole test set, what a published result uses; a smaller one is "
            "ranked apart.",
            min=1,
            step=1,
            group="benchmark",
        ),
        Field(
            "train_examples",
            "Training examples",
            "number",
            None,
            "Train on N examples (task 3: tokens). Empty: the data set's whole training set.",
            min=1,
            step=1,
            group="benchmark",
        ),
        Field(
            "batch_size",
            "Batch per worker",
            "number",
            None,
            "Empty: the task's own batch.",
            min=1,
            step=1,
            group="benchmark",
        ),
        Field(
            "time_limit",
            "Time limit (s)",
            "number",
            None,
            "A safety stop: the run fails when it takes longer (at most "
            f"{lim['time_limit']} s). Alone, the run trains for what fits in it (less "
            f"{served['time_limit_margin']} s for start-up and the final evaluation) when that "
            "is shorter than the task's budget; with a time budget, at least that budget + "
            f"{served['time_limit_margin']} s. Empty: exactly that; for a custom command "
            f"{served['open_division_time_limit']} s.",
            min=1,
            max=lim["time_limit"],
            step=1,
            group="benchmark",
        ),
        Field(
            "resume_from",
            "Resume from run",
            "number",
            None,
            "Optional: the id of a failed or cancelled run; this run continues from its last "
            "checkpoint with that run's settings, except those changed here (its page has a "
            "Resume button). Empty: train from scratch.",
            min=1,
            step=1,
            group="advanced",
        ),
        Field(
            "image",
            "Official image",
            "text",
            help=(
                "Optional: an image of the original mlbench platform, e.g. "
                "mlbench/pytorch-cifar10-resnet20-all-reduce; it stands for the task it runs "
                "here, which must agree with the task above. Empty: the task above."
            ),
            group="advanced",
        ),
        _custom_image(cluster),
        Field(
            "custom_image_command",
            "Custom command",
            "text",
            help=_COMMAND_HELP[cluster],
            group="advanced",
        ),
        Field(
            "custom_backend",
            "Custom backend",
            "text",
            help=(
                "Only with a custom command: the name of the backend it uses, recorded with "
                "the run."
            ),
            group="advanced",
        ),
        Field(
            "run_all_nodes",
            "Run on all nodes",
            "checkbox",
            default["run_all_nodes"],
            "Run the custom command on every worker rank, not only on rank 0.",
            group="advanced",
        ),
    ]
    fields += _series_fields(default)
    return {
        "limits": lim,
        "cluster": cluster,
        "served": served,
        "fields": [asdict(f) for f in fields],
    }
