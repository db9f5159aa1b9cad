"""Runs a stopping master stopped but could not mark FAILED, kept until its next start.

Why a file and not the database: they are written exactly when the database did not
answer. `stopping.py` records them in MLBENCH_HOME/unsettled-runs.json (run id → the
reason to give), and the next start's reconciliation (reconcile.py) ends each one that is
still active with that reason, then forgets them all. Plain JSON, replaced atomically, no
Django: the `mlbench down` command reads nothing of it, the master's processes do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

FILE = "unsettled-runs.json"


def _path(home: Path) -> Path:
    return Path(home) / FILE


def pending(home: Path) -> dict[str, str]:
    """Run id → the reason it is to be marked FAILED with; {} when none (or unreadable)."""
    try:
        data = json.loads(_path(home).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if str(k).isdigit()}


def record(home: Path, run_ids: Iterable[str], reason: str) -> None:
    """Add `run_ids` (kept with the ones recorded before) to be settled with `reason`."""
    entries = pending(home)
    entries.update({str(run_id): reason for run_id in run_ids})
    _write(home, entries)


def forget(home: Path, run_ids: Iterable[str]) -> None:
    entries = pending(home)
    for run_id in run_ids:
        entries.pop(str(run_id), None)
    _write(home, entries)


def _write(home: Path, entries: dict[str, str]) -> None:
    path = _path(home)
    if not entries:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=2))
    tmp.replace(path)
