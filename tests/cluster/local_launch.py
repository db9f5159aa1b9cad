"""Launching on the local cluster as the run job does, for the driver tests."""

import time
from collections.abc import Callable

from mlbench_master.cluster.mpirun import driver_argv, rank_environment
from mlbench_master.cluster.transient import LaunchStart


def launch(driver, run):
    """prepare, build the command, launch: what the job does, with a fixed token."""
    argv = driver_argv(driver, run, driver.prepare(run))
    return driver.launch(run, argv, rank_environment(run, "http://127.0.0.1:9", "tok-123"))


def read_until_exit(execution, timeout=60):
    """(exit code, every output line) once mpirun has exited."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines += execution.read(0.2)
        code = execution.poll()
        if code is not None:
            return code, lines
    raise AssertionError("mpirun did not exit")


def run_to_exit(start: Callable, timeout: float = 60):
    """(exit code, every output line) of the launch `start()` makes, launched once more when
    it met Open MPI's transient launch failure (its PMIx listener, before any rank started):
    the rule the run job keeps (cluster/transient.py), so a test of something else does not
    fail on it."""
    code, lines = read_until_exit(start(), timeout)
    started = LaunchStart()
    started.add(lines)
    if started.failed_transiently(code):
        code, lines = read_until_exit(start(), timeout)
    return code, lines
