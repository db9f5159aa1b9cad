"""Where the master keeps its local state: MLBENCH_HOME, resolved by one rule.

Why one module: the settings (SQLite file, secret key, static files, data sets), the
embedded launcher (master.json, logs, token) and the local cluster driver all live under
MLBENCH_HOME, and they must agree on what an unset or blank variable means. The rule:
MLBENCH_HOME unset, empty or only whitespace means ``~/.mlbench``; any other value is used
as given, with ``~`` expanded. (mlbench_worker/home.py applies the same rule for the client
and the worker.)

This module reads only os.environ: it can be imported before Django is configured (and is,
by settings.py itself). Code that runs with Django set up reads settings.MLBENCH_HOME, which
is this function's answer when the settings were loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = "~/.mlbench"


def mlbench_home() -> Path:
    """MLBENCH_HOME as a path (``~`` expanded); ``~/.mlbench`` when it is unset or blank."""
    value = os.environ.get("MLBENCH_HOME", "")
    return Path(value if value.strip() else DEFAULT_HOME).expanduser()
