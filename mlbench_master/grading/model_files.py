"""A run's final model as the master keeps it, and the result of its ONNX audit:
``<MLBENCH_HOME>/models/<run id>/model.onnx`` and ``audit.json`` beside it.

Why files and not rows: the model is a file (up to MLBENCH_MODEL_MAX_BYTES), downloaded as
posted by `mlbench evaluate`; its audit result describes that file (its SHA-256 is in
it), so the two live together, are replaced together when a model is posted again, and go
together when the run is deleted. Each is put in place by one rename, so a reader meets the
previous file or the new one, never half of one. No run state lives here: the audit marks a
run (results/stored.py reads it), it never changes the run's row.

Who writes what, under the folder's lock (`locked`: flock on the folder, so every master
process on the host takes turns): a model's intake writes its "pending" record, with a new
`audit_id`, and only then puts the model in place; its audit later replaces that record
only while the record is still of its `audit_id` (`replace_if_current`), so a model posted
again meanwhile keeps its own record, and a deleted run's folder is never made again.

What a reader is shown (`audit_of`) is the record, except where it no longer holds: a
"pending" older than its time limit (MLBENCH_AUDIT_TIMEOUT, or task 3's
MLBENCH_PERPLEXITY_TIMEOUT kept in the record as `time_limit_s`, plus GRACE_S) was
interrupted (the master restarted during the audit), and so was one whose `grader` (the
master process running it, `grader()`) is known on this host to have ended; an audit whose predictions file was replaced, or followed
by a later one, does not cover the run's predictions any more. Those read "not audited"
with why, the record's own status kept as `verdict`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings

from mlbench_master.grading import prediction_files
from mlbench_master.results import models as kept

MODEL, AUDIT = "model.onnx", "audit.json"
GRACE_S = 30  # a finished audit's last writes, after its time limit
PENDING, NOT_AUDITED = "pending", "not audited"


class RunGone(Exception):
    """The run's model folder is gone: the run was deleted."""


def folder(run_id: int) -> Path:
    return Path(settings.MLBENCH_HOME) / "models" / str(int(run_id))


def model_path(run_id: int) -> Path:
    return folder(run_id) / MODEL


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def new_audit_id() -> str:
    return uuid.uuid4().hex


@contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold the lock of the run folder `target` (RunGone when it does not exist)."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        raise RunGone(str(target)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not target.is_dir():  # removed while we waited
            raise RunGone(str(target))
        yield
    finally:
        os.close(fd)


def publish(tmp: Path, run_id: int) -> Path:
    """Put a received, checked model in place as the run's model (replacing an earlier
    one); under `locked`, after its "pending" record was written."""
    final = model_path(run_id)
    os.replace(tmp, final)
    return final


def write_audit(target: Path, record: dict[str, Any]) -> None:
    """Store `record` as the audit of the run whose folder is `target`; under `locked`."""
    tmp = target / f".{AUDIT}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, target / AUDIT)
    finally:
        tmp.unlink(missing_ok=True)
    kept.bump([int(target.name)])  # the run's kept result counted the old record's tokens


def replace_if_current(target: Path, audit_id: str, record: dict[str, Any]) -> bool:
    """Store `record` only while the stored audit is still the one of `audit_id` (a model
    posted later has its own) and the run still exists; whether it was stored."""
    try:
        with locked(target):
            if (read(target) or {}).get("audit_id") != audit_id:
                return False
            write_audit(target, record)
            return True
    except RunGone:
        return False


def read(target: Path) -> dict[str, Any] | None:
    """The audit record stored in `target`, as written."""
    try:
        found = json.loads((target / AUDIT).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def audit_of(run_id: int) -> dict[str, Any] | None:
    """The run's audit as readers are shown it, or None when no model was posted."""
    record = read(folder(run_id))
    if record is None:
        return None
    why = _no_longer_holds(run_id, record)
    if not why:
        return record
    return record | {"status": NOT_AUDITED, "why": why, "verdict": record.get("status")}


def grader() -> dict[str, Any]:
    """The master process running an audit, as its "pending" record names it: a reader on
    the same host can tell it ended (a pid alone may be reused: its start time too)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": psutil.Process().create_time(),
    }


def _grader_gone(found: Any) -> bool:
    if not isinstance(found, dict) or found.get("host") != socket.gethostname():
        return False  # another host's (or none named): only the time limit can tell
    try:
        return psutil.Process(int(found["pid"])).create_time() != found.get("started")
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _no_longer_holds(run_id: int, record: dict[str, Any]) -> str:
    if record.get("status") == PENDING:
        if _grader_gone(record.get("grader")):
            return (
                f"interrupted: the master process that ran it (pid {record['grader']['pid']}) "
                "ended before it did (the master was restarted); post the model again"
            )
        try:
            since = dt.datetime.fromisoformat(record["since"])
        except (KeyError, TypeError, ValueError):
            return "interrupted: the audit's record says not when it began; post the model again"
        # Task 3's grade has its own limit, kept in its record (perplexity_audit.py).
        limit, setting = (
            (record["time_limit_s"], "MLBENCH_PERPLEXITY_TIMEOUT")
            if "time_limit_s" in record
            else (settings.MLBENCH_AUDIT_TIMEOUT, "MLBENCH_AUDIT_TIMEOUT")
        )
        if (dt.datetime.now(dt.UTC) - since).total_seconds() > limit + GRACE_S:
            return (
                f"interrupted: the audit began at {record['since']} and did not end within "
                f"{setting} ({limit} s): the master was restarted during it; "
                "post the model again"
            )
    step, sha = record.get("step"), record.get("predictions_sha256")
    if step is None or sha is None:
        return ""
    stored = {f.step: f.sha256 for f in prediction_files.stored(run_id)}
    if stored.get(step) != sha:
        return (
            f"the predictions of step {step} the model was audited against were replaced "
            "or removed after the model was posted; post the model again"
        )
    later = [s for s in stored if s > step]
    if later:
        return (
            f"the model was audited against step {step}, and the run posted predictions of "
            f"a later step ({max(later)}) since: the audit does not cover them"
        )
    return ""


def remove(run_id: int) -> None:
    """Delete the run's model and audit (the run is being deleted)."""
    target = folder(run_id)
    try:
        with locked(target):
            shutil.rmtree(target, ignore_errors=True)
    except RunGone:
        pass
