"""Complete summary records for tests that post one, built by the workers' own function
(mlbench_worker/shared/result.py), so every test posts what a real run posts."""

from __future__ import annotations

from typing import Any

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.result import training_summary


def summary_body(task: str = "resnet20-cifar10", **changes: Any) -> dict[str, Any]:
    """A training run's summary of `task`, with `changes` replacing or adding fields (a
    `config` in `changes` is merged into the default one; `throughput` sets the task's
    throughput field). Changes are applied after the record is built, so a test may make
    one that does not fit."""
    info = catalogue.get(task)
    config = {"batch_size": info.batch_size, "peak_lr": 0.2, "max_epochs": 3,
              "time_budget": None, "threads": 1}  # fmt: skip
    config_changes = changes.pop("config", {})
    reached = changes.get("reached", True) is not False
    body = training_summary(
        task=task,
        outcome={
            "target_accuracy": 0.5,
            "reached": reached,
            "time_to_target": 42.5 if reached else None,
            "final_val_accuracy": 0.61,
            "best_val_accuracy": 0.62,
            "epochs": 3,
        },
        throughput=changes.pop("throughput", 812.0),
        comm_bytes_per_step=1_089_936.0,
        full_allreduce_bytes=1_089_936,
        config=config,
        model=info.model,
        dataset="synthetic",
        num_workers=2,
        backend="mpi",
        device="cpu",
        target="light",
        comm_share=0.12,
        comm_share_total=0.2,
        algorithm="allreduce",
        algorithm_options={"precision": "fp32"},
        implementation="reference",
        elapsed=60.1,
        seed=1,
        versions={"python": "3.11", "torch": "2.13.0", "mpi": "Open MPI 5", "mlbench": "0.2"},
        hardware={"cpu_model": "x", "cpu_count": 2, "threads_per_rank": 1, "hosts": ["h"]},
        stop_reason="target reached",
        run_id=None,
        dataset_note="",
    )
    body["config"].update(config_changes)
    body.update(changes)
    return body
