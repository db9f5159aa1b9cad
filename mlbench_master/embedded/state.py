"""What an embedded master leaves under MLBENCH_HOME for the next command to find.

Why a module of its own: `up` (the supervisor) writes MLBENCH_HOME/master.json (pids, URL,
readiness), the logs folder and, when it stops, stopped.json (what the stop did and could
not record); `down` and `status`, run from any shell later, read them.
Both sides import the paths from here so they cannot disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlbench_master.embedded.procs import pid_alive
from mlbench_worker.shared.home import mlbench_home


def home() -> Path:
    """MLBENCH_HOME (unset or blank: ~/.mlbench; see mlbench_worker/shared/home.py)."""
    return mlbench_home()


def state_path() -> Path:
    return home() / "master.json"


def log_dir() -> Path:
    return home() / "logs"


def stop_report_path() -> Path:
    """What the supervisor's stop did, in words (MLBENCH_HOME/stopped.json), for `down`."""
    return home() / "stopped.json"


def read_state() -> dict[str, Any] | None:
    try:
        return json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None


def write_state(state: dict[str, Any]) -> None:
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_path())


def running_state() -> dict[str, Any] | None:
    """The state of a live embedded master, or None."""
    state = read_state()
    if state and pid_alive(state.get("pid")):
        return state
    return None
