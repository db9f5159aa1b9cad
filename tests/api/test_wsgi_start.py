"""The WSGI entry point imports every view when a server process starts, so that no
request waits for it (mlbench_master/wsgi.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_wsgi_application_loads_the_views():
    code = (
        "import sys, mlbench_master.wsgi; "
        "print(all(m in sys.modules for m in ("
        "'mlbench_master.api.board_views', 'mlbench_master.dashboard.views', "
        "'mlbench_master.api.views')))"
    )
    env = {**os.environ, "MLBENCH_SECRET_KEY": "k" * 50}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
