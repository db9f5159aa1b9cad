"""Which checkpoint a new run may continue: a FAILED or CANCELLED run's last one, when the
new run is the same experiment (the worker's identity check would refuse it otherwise)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_master.run_defaults import DEFAULTS
from mlbench_master.run_rules.errors import ResumeRefused
from mlbench_master.run_rules.schedules import effective_schedule
from mlbench_worker.shared import catalogue, checkpoint_identity

# What a new run may continue from: a run that ended before it could finish.
RESUMABLE_STATES = (Run.FAILED, Run.CANCELLED)
# The point rank 0 posts after each checkpoint (mlbench_worker/training/checkpoint.py): value =
# completed epochs; metadata = epoch, step, elapsed and the checkpoint's identity. The master
# never reads the file (it may live in a worker pod): this is how it knows what one holds.
# Its name and which fields make a checkpoint resumable are declared once, for this rule and
# the worker's own check (mlbench_worker/shared/checkpoint_identity.py).
CHECKPOINT_METRIC = checkpoint_identity.METRIC


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


def resume_point(parent_id: int, run: Mapping[str, Any]) -> ResumePoint:
    """The checkpoint of run `parent_id` that a new run with the fields `run` (as `resolve`
    decides them) would continue.

    One signature for both callers, so they compare the same things: the rules' check (a
    400 at once instead of a run that fails when its worker starts) and runs.new_run, which
    reads the parent again in the transaction that stores the new run (it may have gone).

    Refused (ResumeRefused) when the run does not exist, did not end FAILED or CANCELLED, ran
    a custom command, wrote no checkpoint, or differs from the new run in what the worker's
    identity check (mlbench_worker/training/checkpoint.py) refuses: the task (and with it the
    model and the batch size per worker), the number of workers, the data set, the algorithm
    with its options, the implementation, the seed and the learning-rate schedule.
    """
    task, dataset = run.get("task"), run.get("dataset")
    algorithm, implementation = run.get("algorithm") or None, run.get("implementation") or None
    seed, lr_schedule = run.get("seed"), run.get("lr_schedule")
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None:
        raise ResumeRefused(f"there is no run {parent_id}")
    if RunOrigin.objects.filter(run_id=parent.pk).exists():
        raise ResumeRefused(
            f"run {parent_id} was imported from another installation: its checkpoints stayed "
            "there, and an imported run is read-only; start a fresh run"
        )
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
    info = catalogue.TASKS.get(task or DEFAULTS["task"])
    wanted: dict[str, Any] = {
        "task": task or DEFAULTS["task"],
        "num_workers": int(run["num_workers"]),
    }
    if info is not None:
        wanted.update(model=info.model, batch_size=run.get("batch_size") or info.batch_size)
    if dataset not in (None, "auto"):
        wanted["dataset"] = dataset
    if algorithm is not None:  # the worker refuses another (its model state depends on it)
        wanted.update(algorithm=algorithm, algorithm_options=run.get("algorithm_options") or {})
    if implementation is not None:
        wanted["implementation"] = implementation
    if seed is not None and "seed" in identity:  # the worker refuses another seed too
        wanted["seed"] = seed
    # The worker's rule, in its order (a checkpoint written before algorithms were recorded
    # is an fp32 all-reduce run's); then the schedule, which only the master checks, from
    # the parent's row: the rate the checkpoint continues depends on it.
    differs = checkpoint_identity.first_difference(identity, wanted)
    if differs is None and lr_schedule is not None:
        theirs = effective_schedule(parent.task, parent.lr_schedule)
        ours = effective_schedule(task, lr_schedule)
        if theirs != ours:
            differs = ("lr_schedule", theirs, ours)
    if differs is not None:
        key, theirs, ours = differs
        raise ResumeRefused(
            f"run {parent_id}'s checkpoint is for {key} {theirs!r}, this run's {key} is "
            f"{ours!r}; a checkpoint only continues the same experiment: resume with {key} "
            f"{theirs!r} or start a fresh run"
        )
    return ResumePoint(
        run_id=parent.pk,
        epoch=int(meta.get("epoch") or point.value),
        step=int(meta.get("step") or 0),
        elapsed=float(meta.get("elapsed") or 0.0),
        identity=identity,
    )
