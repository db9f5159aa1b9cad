"""The evaluator's child process (audit_process.py) ends with the process that started it: a
master restarted in the middle of a task-3 grade, which may run for an hour, must not leave
the grade running. Here the child is held reading a FIFO (it never gets the model's bytes)
and its parent is killed; the kernel's parent-death signal ends it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from mlbench_worker.shared.evaluation import audit_process

PARENT = """
import sys
from mlbench_worker.shared.evaluation import audit_process
request = {"mode": "check", "model": sys.argv[1], "run": {}}
audit_process.run(request, audit_process.Limits(seconds=600))
"""


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_child_ends_when_its_parent_is_killed(tmp_path):
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes: none will
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(fifo)])
    children: list[psutil.Process] = []
    try:
        end = time.monotonic() + 60
        while not children:
            assert time.monotonic() < end and parent.poll() is None, "no child started"
            children = [
                c for c in psutil.Process(parent.pid).children()
                if audit_process.__name__ in " ".join(c.cmdline())
            ]  # fmt: skip
            time.sleep(0.1)
        (child,) = children
        time.sleep(2)  # past its start: it set the signal, then blocked on the FIFO
        assert _alive(child)
        parent.kill()
        parent.wait()
        end = time.monotonic() + 10
        while _alive(child) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(child), "the child outlived the process that started it"
    finally:
        parent.kill()
        for child in children:
            if _alive(child):
                child.kill()
