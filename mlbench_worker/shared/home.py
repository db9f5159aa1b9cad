"""Where the worker package keeps its local state: MLBENCH_HOME, resolved by one rule.

Why one module: the master (settings, the embedded launcher, the local cluster), the client
(the URL and token the embedded master writes), the `mlbench` command and the worker's data
cache all look under MLBENCH_HOME, and they must agree on what an unset or blank variable
means. The rule: MLBENCH_HOME unset, empty or only whitespace means ``~/.mlbench``; any
other value is used with ``~`` expanded, and a relative one is made absolute against the
working directory of the command that reads it: the master's services and the ranks run
in other folders (a launch runs in its own), and a relative home there named another place
(the chaos series found every run failing so, its home given as ``chaos-results/...``).
It imports nothing but the standard library (no torch, no Django), so the master may
import it too (a shared worker module, as tests/test_worker_rooms.py allows) and can read
it before Django is configured.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = "~/.mlbench"


def mlbench_home() -> Path:
    """MLBENCH_HOME as an absolute path (``~`` expanded); ``~/.mlbench`` when it is unset
    or blank."""
    value = os.environ.get("MLBENCH_HOME", "")
    return Path(value if value.strip() else DEFAULT_HOME).expanduser().absolute()
