"""A run's final model as the master keeps it, and the result of its ONNX audit:
``<MLBENCH_HOME>/models/<run id>/model.onnx`` and ``audit.json`` beside it.

Why files and not rows: the model is a file (up to MLBENCH_MODEL_MAX_BYTES), downloaded as
posted by `mlbench evaluate`; its audit result describes that file (its SHA-256 is in
it), so the two live together, are replaced together when a model is posted again, and go
together when the run is deleted. Each is put in place by one rename, so a reader meets the
previous file or the new one, never half of one. No run state lives here: the audit marks a
run (results/stored.py reads it), it never changes the run's row.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings

MODEL, AUDIT = "model.onnx", "audit.json"


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


def publish(tmp: Path, run_id: int) -> Path:
    """Put a received, checked model in place as the run's model (replacing an earlier one)."""
    final = model_path(run_id)
    os.replace(tmp, final)
    return final


def write_audit(target: Path, result: dict[str, Any], model_sha256: str | None = None) -> bool:
    """Store `result` as the audit of the run whose folder is `target` (found when the model
    was posted: an audit finishing later writes there whatever the settings are by then);
    with `model_sha256`, only while the stored audit is still of that model (a later
    model's audit is never overwritten by an earlier one's). Whether it was stored."""
    if not target.is_dir():
        return False  # the run was deleted meanwhile
    if model_sha256 is not None and (_read(target) or {}).get("model_sha256") != model_sha256:
        return False
    tmp = target / f".{AUDIT}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, target / AUDIT)
    return True


def _read(target: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((target / AUDIT).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def audit_of(run_id: int) -> dict[str, Any] | None:
    """The run's stored audit result, or None when no model was posted."""
    return _read(folder(run_id))


def remove(run_id: int) -> None:
    """Delete the run's model and audit (the run is being deleted)."""
    shutil.rmtree(folder(run_id), ignore_errors=True)
