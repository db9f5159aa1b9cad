"""The options a task-2 engine implementation (spark, flink) cannot honour, refused in one
place: they train logistic regression on CPUs in float32 through their engine's own
combine, and write no checkpoints. Each refusal names the option and why."""

from __future__ import annotations

from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError


def refuse_engine_options(
    config: RunConfig, name: str, *, models: str, combine: str, combines: str
) -> None:
    """`name`: the implementation; `models`: what it trains, after "logistic regression";
    `combine`: its engine's combine of gradients ("Spark's tree aggregate"); `combines`:
    the verb for it ("aggregates")."""
    if config.model != "logistic-regression":
        raise WorkerError(
            f"--model {config.model}: the {name} implementation trains logistic regression "
            f"only{models}; use --implementation reference"
        )
    if config.device.startswith("cuda"):
        raise WorkerError(f"--device cuda: the {name} implementation trains on CPUs only")
    if config.amp:
        raise WorkerError(f"--amp: the {name} implementation trains in float32 only; drop --amp")
    if config.resume or config.resume_from:
        option = "--resume-from" if config.resume_from else "--resume"
        raise WorkerError(
            f"{option}: the {name} implementation writes no checkpoints, so it cannot "
            "continue a run; start a new one, or use --implementation reference"
        )
    if config.bucket_mb is not None:
        raise WorkerError(f"--bucket-mb: {combine} has no buckets; drop --bucket-mb")
    precision = (config.algorithm_options or {}).get("precision", "fp32")
    if precision != "fp32":
        raise WorkerError(
            f"--algorithm-option precision={precision}: the {name} implementation "
            f"{combines} float32 gradients only"
        )
