"""Whether a workers' Python interpreter can import a module, asked without importing it.

The master must never import an implementation's framework (TensorFlow alone takes seconds
and a gigabyte), yet it should refuse a run its workers cannot start. For the master's own
interpreter `importlib.util.find_spec` answers without importing; another interpreter on
this machine (or on a shared filesystem) is asked the same in a subprocess, once per
process and module.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys

# Exits 0 when the module can be imported, 3 when not (any other code: it could not ask).
# "program:NAME" asks for a program on the PATH instead (Java, for Spark).
PROGRAM = "program:"
PROBE = (
    "import importlib.util, shutil, sys; n = sys.argv[1]; "
    f"sys.exit(0 if (shutil.which(n[{len(PROGRAM)}:]) if n.startswith({PROGRAM!r}) "
    "else importlib.util.find_spec(n)) else 3)"
)


@functools.lru_cache(maxsize=32)
def python_has_module(python: str, module: str) -> bool | None:
    """True or False; None when `python` cannot be run from here to ask. `module` may be
    "program:NAME": then whether NAME is on the PATH."""
    # abspath, not realpath: two virtualenvs' pythons link to one interpreter, but each
    # imports from its own environment (the flink implementation's has pyflink).
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        if module.startswith(PROGRAM):
            return shutil.which(module.removeprefix(PROGRAM)) is not None
        return importlib.util.find_spec(module) is not None
    try:
        done = subprocess.run(
            [python, "-c", PROBE, module], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return answer(done.returncode)


def answer(code: int) -> bool | None:
    """What PROBE's exit code says, wherever it ran (here, in a pod)."""
    if code in (0, 3):
        return code == 0
    return None
