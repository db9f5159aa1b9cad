"""Which fields make a checkpoint resumable, declared once for the worker and the master.

A checkpoint continues only the same experiment: a run with another task, model, number of
workers, batch per worker, seed, data set, algorithm (with its options) or implementation
would train something else from the same weights, and its result would be no result of
either run. The worker writes these fields into every checkpoint (and into the `checkpoint`
metric point it reports once the file is in place); its `--resume` refuses a checkpoint
whose fields differ from the run's (mlbench_worker/training/checkpoint.py); the master's
resume rule reads the reported point and refuses the same mismatch before a run is
queued, so a run it accepts is one its worker accepts.

Checkpoints written before the algorithm and implementation dimensions existed lack those
fields: they were fp32 all-reduce runs of the reference loop (`BEFORE_DIMENSIONS`).

Plain data and the standard library only: the master, the client and the ranks import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The metric point rank 0 posts after each checkpoint is written: value = epochs completed;
# metadata = epoch, step, elapsed and the checkpoint's identity (`identity` below).
METRIC = "checkpoint"

# What must be equal for a checkpoint to be continued, in the order a checkpoint records them.
KEYS = (
    "task",
    "model",
    "num_workers",
    "batch_size",
    "seed",
    "dataset",
    "algorithm",
    "algorithm_options",
    "implementation",
)

# What a checkpoint written before a dimension was recorded held.
BEFORE_DIMENSIONS: dict[str, Any] = {
    "algorithm": "allreduce",
    "algorithm_options": {"precision": "fp32"},
    "implementation": "reference",
}


def identity(**values: Any) -> dict[str, Any]:
    """A checkpoint's identity: every one of KEYS, in their order, and nothing else."""
    missing, unknown = set(KEYS) - set(values), set(values) - set(KEYS)
    if missing or unknown:
        raise TypeError(
            f"a checkpoint identity needs exactly {', '.join(KEYS)}: "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    made = {key: values[key] for key in KEYS}
    made["algorithm_options"] = dict(made["algorithm_options"])
    return made


def completed(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded identity with the fields an older checkpoint lacks filled in."""
    return {**BEFORE_DIMENSIONS, **recorded}


def first_difference(
    recorded: Mapping[str, Any], wanted: Mapping[str, Any]
) -> tuple[str, Any, Any] | None:
    """The first of KEYS (in their order) that `wanted` names and the checkpoint's `recorded`
    identity (completed) holds with another value: (key, recorded value, wanted value);
    None when the checkpoint fits. Keys of `wanted` outside KEYS are not compared."""
    theirs = completed(recorded)
    for key in KEYS:
        if key in wanted and theirs.get(key) != wanted[key]:
            return key, theirs.get(key), wanted[key]
    return None
