"""Setting a run up: the one path every task takes, and the steps all tasks share.

A task names the module that sets it up (`task.setup`: mlbench_worker.tasks.cifar10.setup,
.imagenet.setup, .epsilon.setup). That module's `build(config, comm, task, say,
open_reporter)` applies the task's own rules (its data, learning-rate scaling, schedule,
summary entries) and hands back a `Built`; what every task does the same way is here:
`place_model` (the same initial weights on every rank), `goal`, `synthetic_banner`. Then
`build_run` sets how the ranks combine their work (`exchange_gradients`: the training
algorithm and its all-reduce settings), the one place that choice is made, so a new
algorithm plugs in there and in mlbench_worker/algorithms/, never in a task's set-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mlbench_worker.algorithms import registry
from mlbench_worker.data import synthetic_banner  # noqa: F401 - torch-free there, shared
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.algorithm_catalogue import check
from mlbench_worker.tasks import LanguageTask, LinearTask, Task
from mlbench_worker.training.comm import Communicator, broadcast_model
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.recipe import Goal
from mlbench_worker.training.trainer import Trainer

Say = Callable[[str], None]  # prints a line on rank 0 (flushed), nothing elsewhere


@dataclass
class Built:
    """What a task's set-up hands to the part of a run every task shares (run.py)."""

    trainer: Trainer
    dataset: str  # what was used: the real data set's name, or "synthetic"
    note: str  # why synthetic was used, when it was a fallback
    real_name: str  # the real data set as people call it, for the synthetic banner
    peak_lr: float
    data_line: str  # e.g. "data cifar10 (50000 train / 10000 test images)"
    config: dict  # task-specific entries of the summary's config
    after_restore: Callable[[Trainer], None] = lambda _trainer: None
    # Task-specific results for the summary, and lines printed under its table.
    results: Callable[[Trainer], dict] = lambda _trainer: {}
    footer: Callable[[dict], str] = lambda _summary: ""


def build_run(
    config: RunConfig,
    comm: Communicator,
    task: Task | LinearTask | LanguageTask,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """Find the run's algorithm (before the data: a refused one costs seconds), set the run up
    with the task's own module, then choose its gradient exchange."""
    outside = registry.is_outside(config.algorithm, config.algorithm_source)
    loaded = load_algorithm(config, comm) if outside else None
    builder = importlib.import_module(task.setup)
    built: Built = builder.build(config, comm, task, say, open_reporter)
    exchange_gradients(built.trainer, config, loaded)
    return built


def load_algorithm(config: RunConfig, comm: Communicator) -> registry.Loaded:
    """The run's algorithm from the registry (a built-in, an installed module or an uploaded
    file), and its options checked against its declaration; every rank loads it itself and
    all agree before going on, so a refusal on one rank (a fetch that failed) ends them all
    with the same message instead of leaving the others waiting."""
    problem, loaded = None, None
    try:
        loaded = registry.load(config.algorithm, config.algorithm_source, config.master_url,
                               config.token)  # fmt: skip
        _, problems = registry.check_options(loaded, config.algorithm_options, comm.size)
        if problems:
            problem = f"--algorithm {config.algorithm} ({loaded.where()}): " + "; ".join(problems)
    except WorkerError as exc:
        problem = str(exc)
    first = next((p for p in comm.allgather_object(problem) if p), None)
    if first:
        raise WorkerError(first)
    assert loaded is not None
    return loaded


def exchange_gradients(
    trainer: Trainer, config: RunConfig, loaded: registry.Loaded | None = None
) -> None:
    """How the ranks combine their work: --algorithm and its options (allreduce: also
    --no-overlap, --bucket-mb).

    Called once per run, after the task's set-up: the trainer is complete, so every rule
    of the algorithm (allreduce_exchange.choose's for allreduce) can be checked against it, and the
    options again against the worker count MPI reports (the parser knew it only when
    mpirun announced it).
    """
    if loaded is None and registry.is_outside(config.algorithm, config.algorithm_source):
        loaded = load_algorithm(config, trainer.comm)
    name = loaded or config.algorithm  # a built-in: the registry loads it by name
    options, problems = (
        registry.check_options(loaded, config.algorithm_options, trainer.comm.size)
        if loaded
        else check(config.algorithm, config.algorithm_options, trainer.comm.size)
    )
    if problems:
        raise WorkerError(f"--algorithm {config.algorithm}: " + "; ".join(problems))
    stall = config.algorithm_stall_seconds
    trainer.set_algorithm(
        name,
        options,
        not config.no_overlap,
        config.bucket_mb,
        config.implementation,
        **({"stall_seconds": stall} if stall is not None else {}),
    )


def place_model(
    make: Callable[[], torch.nn.Module], config: RunConfig, comm: Communicator
) -> torch.nn.Module:
    """The model from `make`, on this rank's device, equal on every rank.

    Seeded before it is made so a run's initial weights depend only on --seed; then rank
    0's weights are broadcast, so ranks agree whatever their random state.
    """
    torch.manual_seed(config.seed)
    model = make().to(comm.device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    broadcast_model(model, comm)
    return model


def goal(config: RunConfig, task: Task | LinearTask | LanguageTask) -> Goal:
    """When the run stops: the task's goal for --target (its value, metric and direction
    from the catalogue), --max-epochs, --time-budget."""
    entry = catalogue.get(task.name).goal(config.target)
    return Goal(
        config.target,
        task.target_accuracy(config.target),
        config.max_epochs,
        config.time_budget,
        metric=entry.metric,
        direction=entry.direction,
    )
