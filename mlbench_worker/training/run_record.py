"""A training run's published record (its summary), built by one function for every
implementation: `run_record(config, facts, progress, ...)`.

The record's fields are declared in mlbench_worker/shared/result.py. Most of them are the
run's configuration (`RunConfig`: the task, model, target, algorithm and its options,
implementation, seed, run id, batch, epochs, budget), and are taken from it here, once;
the rest is what the run found out or decided while it ran: the data set auto chose, the
ranks MPI reported, the backend and device used, the communication measured, versions and
hardware, an outside algorithm's declared name and completed options (the configuration
holds only what the command line said: a file's path, options as text), and what a task or
an implementation adds (`RunFacts`, which each implementation fills in), and how far
training got (the `Progress` of the shared epoch loop). An uploaded algorithm's SHA-256
(the configuration's) is recorded too, so the summary alone names the code that ran.

The summary's config holds the common entries first (batch, peak rate, epochs, budget),
then the task's and the implementation's own entries (`RunFacts.config`), then the threads.

Torch-free: the TensorFlow and Spark processes build their records here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlbench_worker.shared.result import training_summary
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.progress import Progress, finite, outcome


@dataclass(frozen=True)
class RunFacts:
    """What an implementation's run decided or measured that its RunConfig does not hold."""

    dataset: str  # what was used: the real data set's name, or "synthetic"
    dataset_note: str  # why synthetic data was used when auto fell back to it
    num_workers: int
    backend: str  # how gradients travelled: mpi, gloo, nccl, a framework's collective
    device: str
    threads: int  # compute threads per rank
    peak_lr: float
    comm_share: float
    comm_share_total: float
    comm_bytes_per_step: float  # the mean over ranks
    # One rank's bytes from the start to the evaluation that reached the goal, the mean over
    # ranks (Progress.comm_bytes_at_target); None: not reached.
    comm_bytes_to_target: float | None
    full_allreduce_bytes: int  # an fp32 all-reduce of the model's gradients (0: nothing sent)
    versions: Mapping[str, Any]
    hardware: Mapping[str, Any]
    # The task's and the implementation's entries of the summary's config, in their order.
    config: Mapping[str, Any] = field(default_factory=dict)
    # The task's own results (task 1b's top-5 accuracy, task 3's perplexities).
    results: Mapping[str, Any] = field(default_factory=dict)
    # What an implementation other than the reference does differently (None: nothing said).
    implementation_note: str | None = None
    # The algorithm as it ran, when the configuration cannot say it: an outside algorithm's
    # declared NAME (the configuration holds its path or package.module) and its options
    # typed and completed by its declaration (the configuration holds them as given, text).
    # None: the configuration's (a built-in's, already checked and completed by the parser).
    algorithm: str | None = None
    algorithm_options: Mapping[str, Any] | None = None


def comm_shares(
    time_data: float, time_compute: float, time_comm: float, time_comm_total: float | None = None
) -> tuple[float, float]:
    """(exposed, total) communication's share of the step time data + compute + comm, from
    the ranks' summed times; without a total (nothing was overlapped) both are the exposed."""
    step_total = float(time_data + time_compute + time_comm)
    if step_total <= 0:
        return 0.0, 0.0
    exposed = float(time_comm / step_total)
    total = exposed if time_comm_total is None else float(time_comm_total / step_total)
    return exposed, total


def run_record(
    config: RunConfig,
    facts: RunFacts,
    progress: Progress,
    *,
    target_accuracy: float,
    throughput: float,
    elapsed: float,
) -> dict[str, Any]:
    """The run's summary (shared/result.py's training record) from its configuration, what
    it decided and measured (`facts`), how far it got (`progress`, whose goal value is
    `target_accuracy`), its throughput (NaN when not measurable) and its benchmark clock."""
    note = {} if facts.implementation_note is None else {
        "implementation_note": facts.implementation_note
    }  # fmt: skip
    # An uploaded algorithm's hash: which code ran, so the summary alone names it (the
    # master's run holds the same as its algorithm_source).
    source = {"algorithm_source": config.algorithm_source} if config.algorithm_source else {}
    options = config.algorithm_options if facts.algorithm_options is None else (
        facts.algorithm_options
    )  # fmt: skip
    return training_summary(
        task=config.task,
        model=config.model,
        dataset=facts.dataset,
        num_workers=facts.num_workers,
        backend=facts.backend,
        device=facts.device,
        target=config.target,
        outcome=outcome(progress, target_accuracy),
        throughput=finite(throughput),
        comm_share=facts.comm_share,
        comm_share_total=facts.comm_share_total,
        algorithm=facts.algorithm or config.algorithm,
        algorithm_options=dict(options),
        **source,
        implementation=config.implementation,
        comm_bytes_per_step=facts.comm_bytes_per_step,
        comm_bytes_to_target=facts.comm_bytes_to_target,
        full_allreduce_bytes=facts.full_allreduce_bytes,
        elapsed=elapsed,
        seed=config.seed,
        versions=dict(facts.versions),
        hardware=dict(facts.hardware),
        stop_reason=progress.stop_reason,
        run_id=config.run_id,
        dataset_note=facts.dataset_note,
        **note,
        **facts.results,
        config={
            "batch_size": config.batch_size,
            "peak_lr": facts.peak_lr,
            "max_epochs": config.max_epochs,
            "time_budget": config.time_budget,
            **facts.config,
            "threads": facts.threads,
        },
    )
