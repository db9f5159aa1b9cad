"""What the engine implementations (spark, flink, tensorflow) do alike with the ranks mpirun
started, written once: MPI for coordination only, the address their processes bind to, the
memory a rank may offer, JVMs that die with their rank, and the wait for rank 0's exit code.

Why these rules are shared and not each engine's: they are the platform's promises about a
run, not the engine's. A run's processes bind where the reference's would (training/comm.py:
loopback when every rank is on one host, else the address the host name resolves to), so an
engine's traffic crosses the links MPI's would; no process of a run may outlive its rank, so a
cancelled or killed run leaves nothing; and a waiting rank sleeps rather than spins, leaving
its cores to the engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError

# The engines' own pages are on the ranks' addresses: never through a proxy the environment
# names for downloads (the local driver's slots have one).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
POLL = 0.2  # seconds between the polls of a waiting rank
START_TIMEOUT = 300.0  # seconds for an engine's processes to come up on a busy machine
_PR_SET_PDEATHSIG = 1


class Control:
    """MPI's COMM_WORLD for coordination only: who is rank 0, addresses by broadcast,
    barriers, per-rank figures gathered, aborting the job. Nothing of training goes through
    it."""

    def __init__(self) -> None:
        from mpi4py import MPI  # here: the parser and the refusals run without MPI

        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()

    def barrier(self) -> None:
        self.world.Barrier()

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        return self.world.bcast(obj, root=root)

    def allgather_object(self, obj: Any) -> list:
        return self.world.allgather(obj)

    def gather_object(self, obj: Any, root: int = 0) -> list | None:
        return self.world.gather(obj, root=root)

    def quiet_barrier(self, alive: Callable[[], None] | None = None) -> None:
        """Wait for every rank, sleeping between polls; `alive()` (when given) is asked at
        each poll and raises when what this rank keeps running has died."""
        request = self.world.Ibarrier()
        while not request.Test():
            if alive is not None:
                alive()
            time.sleep(POLL)

    def rank0_code(self, code: int, alive: Callable[[], None]) -> int:
        """Rank 0's exit code on every rank, waited for without spinning (a non-blocking
        broadcast polled); the other ranks ask `alive()` meanwhile, which raises when their
        engine process has died."""
        buffer = np.array([code], np.int32)
        request = self.world.Ibcast(buffer, root=0)
        while not request.Test():
            if self.rank:
                alive()
            time.sleep(POLL)
        return int(buffer[0])

    def abort(self, code: int = 1) -> None:
        self.world.Abort(code)


def java_missing(engine: str) -> str | None:
    """Why no JVM can start here, or None."""
    if os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        f"java is not on this worker's PATH (and JAVA_HOME names none): {engine} needs Java 17 "
        "or later (Debian: apt-get install default-jre-headless)"
    )


def bind_address(control: Control) -> str:
    """The address this rank's engine processes bind to (the module docstring's rule)."""
    hostnames = control.allgather_object(socket.gethostname())
    if all(h == hostnames[0] for h in hostnames):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def ranks_here() -> int:
    """How many of the run's ranks share this machine (mpirun says)."""
    return int(
        os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("MPI_LOCALNRANKS") or 1
    )


def available_memory_mb(unknown: int) -> int:
    """Megabytes available to this rank's machine: the kernel's MemAvailable (`unknown`
    where it cannot be read), capped by the container's memory limit when there is one."""
    available = _meminfo_mb("MemAvailable") or unknown
    limit = _cgroup_limit_mb()
    return available if limit is None else min(available, limit)


def _meminfo_mb(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def _cgroup_limit_mb() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            value = int(Path(path).read_text().strip())
            if value < 1 << 50:
                return value // (1 << 20)
    return None


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the rank that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


class RankProcesses:
    """The engine processes (JVMs) one rank started: each dies with the rank, is watched
    while the rank waits, and is ended by `stop`, which removes the rank's folder."""

    def __init__(self, engine: str, rank: int, work_dir: Path) -> None:
        self.engine, self.rank, self.work_dir = engine, rank, work_dir
        self.processes: list[tuple[subprocess.Popen, str]] = []

    def start(self, command: list[str], env: dict[str, str], name: str, **popen: Any) -> None:
        """Start `command` in the rank's folder; `name` says which process it is in
        messages."""
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            cwd=self.work_dir,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - one prctl, before exec
            **popen,
        )
        self.processes.append((process, name))

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Poll `ready()` until true; WorkerError after START_TIMEOUT, RuntimeError as soon
        as one of the rank's processes has exited."""
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise WorkerError(
                    f"waited {START_TIMEOUT:g} s for {what}; see {self.engine}'s lines above"
                )
            time.sleep(POLL)

    def check(self) -> None:
        """Raise when one of this rank's processes has exited."""
        for process, name in self.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"a {self.engine} process of rank {self.rank} ({name}) exited with code "
                    f"{process.returncode}"
                )

    def stop(self) -> None:
        """Terminate the processes (the last started first) and wait; remove the folder."""
        for process, _ in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process, _ in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def say_unused_options(
    config: RunConfig, say: Callable[[str], None], name: str, exchange: str
) -> None:
    """Rank 0 says which options an engine run accepts but does not use: checkpoints (an
    engine run writes none) and the backend (`exchange`, the engine's own, carries the
    gradients)."""
    if config.checkpoint_dir:
        say(f"note: --checkpoint-dir {config.checkpoint_dir}: the {name} implementation writes "
            "no checkpoints; the run goes on without them")  # fmt: skip
    if config.backend != "mpi":
        say(f"note: --backend {config.backend} is not used: {exchange} carry the exchange")
