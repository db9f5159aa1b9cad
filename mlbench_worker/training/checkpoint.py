"""Checkpoints: rank 0 writes one after every epoch; `--resume` continues from it.

A checkpoint fits only the same experiment: the fields of its identity are declared once,
in mlbench_worker/shared/checkpoint_identity.py, which the master's resume rule reads too.
The number of workers is said first (the global batch, the learning rate and the data
shards all depend on it, so resuming with another count would silently be a different
experiment); any other field that differs is refused with a message naming it.

Each time one is written, rank 0 also reports it as a `checkpoint` metric point (value: the
epochs completed; metadata: epoch, step, elapsed and the identity): the master cannot read a
file that may live in a worker pod, and this is how it knows that a run has a checkpoint a
new run can resume (`resume_from`), and what it holds. `adopt` copies another run's
checkpoint into this run's folder (`--resume-from`) so the new run's own checkpoints never
overwrite its parent's. torch is imported only where a checkpoint is written or read, so
option parsing (options.py) can use `adopt` before torch is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

from mlbench_worker.shared import checkpoint_identity
from mlbench_worker.shared.checkpoint_identity import METRIC  # the point reported when written
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError

FILENAME = "checkpoint.pt"


def identity_of(config: RunConfig, num_workers: int, dataset: str) -> dict:
    """This run's checkpoint identity: the run configuration's fields, the number of ranks
    MPI reports and the data set actually used (auto's choice)."""
    return checkpoint_identity.identity(
        num_workers=num_workers,
        dataset=dataset,
        **{
            key: getattr(config, key)
            for key in checkpoint_identity.KEYS
            if key not in ("num_workers", "dataset")
        },
    )


def save(trainer: object, folder: str | Path, identity: dict) -> Path:
    """Write the trainer's state atomically (a crash never leaves half a checkpoint)."""
    import torch

    from mlbench_worker.training.trainer import Trainer

    assert isinstance(trainer, Trainer)
    path = Path(folder) / FILENAME
    # Plain JSON types only, so the file loads with torch.load(weights_only=True).
    progress = json.loads(json.dumps(dataclasses.asdict(trainer.progress), default=float))
    progress["elapsed_before"] = trainer.elapsed()
    progress["stop_reason"] = ""
    state = {
        "identity": identity,
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scaler": trainer.scaler.state_dict() if trainer.scaler else None,
        "progress": progress,
    }
    tmp = path.with_name(f".{FILENAME}.tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)
    # Only once the file is in place: a reported checkpoint is one that can be resumed.
    trainer.reporter.metric(
        METRIC,
        float(trainer.progress.epoch),
        epoch=trainer.progress.epoch,
        step=trainer.progress.step,
        elapsed=round(progress["elapsed_before"], 3),
        identity=dict(identity),
    )
    trainer.reporter.flush()
    return path


def adopt(source: str | Path, folder: str | Path) -> str | None:
    """Copy the checkpoint in `source` (another run's folder) into `folder`, replacing any.

    Returns None when done, else why it cannot be (for the option parser's message). The
    copy is written under a temporary name and renamed, so `folder` never holds half a file.
    """
    src, dest = Path(source) / FILENAME, Path(folder) / FILENAME
    if not src.is_file():
        return (
            f"--resume-from {source}: there is no {FILENAME} there (the run wrote none, or it "
            "was deleted); start a fresh run instead"
        )
    if dest.exists() and os.path.samefile(src, dest):
        return None
    tmp = dest.with_name(f".{FILENAME}.adopt{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return f"--resume-from {source}: cannot copy {src} to {dest} ({exc.strerror or exc})"
    return None


def load(folder: str | Path, identity: dict) -> dict:
    """The checkpoint in `folder`, checked against this run's `identity` (WorkerError if unfit)."""
    import torch

    path = Path(folder) / FILENAME
    if not path.is_file():
        raise WorkerError(f"--resume: no checkpoint at {path}; start without --resume")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WorkerError(
            f"--resume: {path} cannot be read ({exc}); delete it to start afresh"
        ) from exc
    theirs = state.get("identity", {})
    if theirs.get("num_workers") != identity["num_workers"]:
        raise WorkerError(
            f"--resume: {path} was written by a run with {theirs.get('num_workers')} workers, "
            f"this run has {identity['num_workers']}. The global batch, learning rate and data "
            f"shards depend on the number of workers: resume with mpirun -n "
            f"{theirs.get('num_workers')}, or start a fresh run without --resume."
        )
    # Checkpoints written before algorithms and implementations existed were all-reduce
    # runs of the reference loop (checkpoint_identity.BEFORE_DIMENSIONS).
    differs = checkpoint_identity.first_difference(theirs, identity)
    if differs is not None:
        key, recorded, wanted = differs
        raise WorkerError(
            f"--resume: {path} is for {key} {recorded!r}, this run uses "
            f"{wanted!r}; resume with the same options or start afresh."
        )
    return state


def restore(trainer: object, state: dict) -> None:
    """Put a loaded checkpoint's state into the trainer (every rank does this)."""
    from mlbench_worker.training.trainer import Progress, Trainer

    assert isinstance(trainer, Trainer)
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.scaler and state.get("scaler"):
        trainer.scaler.load_state_dict(state["scaler"])
    progress = dict(state["progress"])
    if "comm_bytes" not in progress and trainer.comm.size > 1:
        # Written before bytes were counted, by an fp32 all-reduce run: what it sent.
        progress["comm_bytes"] = float(progress.get("step", 0) * trainer.full_allreduce_bytes())
    trainer.progress = Progress(**progress)
    if not trainer.grads.intact():
        raise RuntimeError("restoring the optimizer replaced the flat gradient views")
