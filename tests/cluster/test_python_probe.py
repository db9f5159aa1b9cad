"""The workers' probe (cluster/python_probe.py): a module by import look-up, a program
(Java, for Spark) by the PATH, asked of this interpreter directly and of another one in a
subprocess, the way the Kubernetes driver runs it in a pod."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from mlbench_master.cluster import python_probe


@pytest.mark.parametrize(
    "requirement, found",
    [("json", True), ("no_such_module_xyz", False), ("program:sh", True),
     ("program:no-such-program-xyz", False)],
)  # fmt: skip
def test_the_probe_answers_modules_and_programs_here_and_in_a_subprocess(
    tmp_path, requirement, found
):
    assert python_probe.python_has_module(sys.executable, requirement) is found
    # Another interpreter (a link has another path): the probe's own exit code.
    other = tmp_path / "python"
    other.symlink_to(shutil.which("python3") or sys.executable)
    done = subprocess.run(
        [str(other), "-c", python_probe.PROBE, requirement], capture_output=True, check=False,
        env={**os.environ},
    )  # fmt: skip
    assert python_probe.answer(done.returncode) is found, done.stderr
