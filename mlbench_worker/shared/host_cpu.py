"""The processor's model name, read the same way by a worker (its summary's
hardware.cpu_model) and by the master (a study reuses a cell only on the same CPU model,
mlbench_master/studies/store.py): one reader, so the two strings compare equal."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The processor's name, so results say what they were measured on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
