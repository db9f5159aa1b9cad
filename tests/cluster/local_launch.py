"""Launching on the local cluster as the run job does, for the driver tests."""

import time

from mlbench_master.cluster.mpirun import driver_argv, rank_environment


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
