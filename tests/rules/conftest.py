"""The JavaScript half of the shared rules: every case's answer from the dashboard's own
modules, run once per session by node (run_js.mjs).

node is given what the pages are given: the task catalogue as the templates embed it
(mlbench_master/dashboard/tasks.py) and the run rules as GET /api/runs/defaults/ serves
them (the view's serializer on `run_rules.served()`), so the scripts answer from the same
data the browser reads.

Without node the JavaScript half skips on a developer's machine and fails in CI (CI set),
as a missing browser does for tests/browser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _missing(why: str) -> None:
    """Skip on a developer's machine; in CI a missing capability must fail, not pass."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def served_defaults() -> dict:
    """GET /api/runs/defaults/'s answer on this master, as the view builds it."""
    from mlbench_master import run_rules
    from mlbench_master.api.serializers import RunDefaultsSerializer

    return json.loads(json.dumps(RunDefaultsSerializer(run_rules.served()).data))


@pytest.fixture(scope="session")
def js() -> dict:
    """Every case's answer from the dashboard's JavaScript, by rule and case name."""
    from mlbench_master.dashboard.tasks import task_catalogue

    node = shutil.which("node")
    if node is None:
        _missing("node not found on PATH: the JavaScript half of the shared rules needs it")
    done = subprocess.run(
        [node, str(HERE / "run_js.mjs")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "MLBENCH_TASK_CATALOGUE": json.dumps(task_catalogue()),
            "MLBENCH_RUN_DEFAULTS": json.dumps(served_defaults()),
        },
    )
    assert done.returncode == 0, f"run_js.mjs failed:\n{done.stderr}"
    return json.loads(done.stdout)
