"""A Spark standalone cluster over the ranks mpirun started: one Spark master on rank 0, one
Spark worker on every rank, each with the rank's cores and a share of its machine's memory.

Why inside the ranks and not from the cluster driver: the drivers (local slots, Slurm,
Kubernetes) already start one process per worker where the run's resources, network shaping
and cancellation apply; a JVM a rank starts lives in the same slot, node or pod, binds to the
address the rank uses (the reference's rendezvous rule, training/comm.py: loopback when every
rank is on one host, else the address its host name resolves to), so Spark's traffic crosses
the same links MPI's would. MPI (mpi4py) only coordinates: the master's address goes out by
broadcast, barriers order start and stop; no training data goes through it.

No JVM may outlive its rank. Each is started with the kernel's parent-death signal
(PR_SET_PDEATHSIG = SIGKILL), so a rank killed by anything, even SIGKILL, takes its Spark
master or worker with it; the worker's executors end when their worker's connection drops;
the application's own JVM (pyspark's gateway, rank 0) ends when its Python's pipe closes. On a
normal end, `stop` terminates them and waits. Their logs are kept at WARN (a log4j2 file in a
configuration folder of the run's own), so a run's log shows Spark's problems, not its chatter.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mlbench_worker.shared.localhost import free_port
from mlbench_worker.training.errors import WorkerError

# Spark's own pages are on the ranks' addresses: never through a proxy the environment
# names for downloads (the local driver's slots have one).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

START_TIMEOUT = 300.0  # seconds for the master to listen and every worker to register
POLL = 0.2
_PR_SET_PDEATHSIG = 1
LOG_CONFIG = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %d{HH:mm:ss} %p %c{1}: %m%n
logger.blas.name = dev.ludovic.netlib
logger.blas.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


class Control:
    """MPI's COMM_WORLD for coordination only: who is rank 0, the master's address, barriers
    that wait without spinning (a rank waiting for the application must leave its cores to
    Spark), aborting the job."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        return self.world.bcast(obj, root=root)

    def allgather_object(self, obj: Any) -> list:
        return self.world.allgather(obj)

    def gather_object(self, obj: Any, root: int = 0) -> list | None:
        return self.world.gather(obj, root=root)

    def quiet_barrier(self, alive: Any = None) -> None:
        """Wait for every rank, sleeping between polls; `alive()` (when given) is asked at
        each poll and raises when what this rank keeps running has died."""
        request = self.world.Ibarrier()
        while not request.Test():
            if alive is not None:
                alive()
            time.sleep(POLL)

    def abort(self, code: int = 1) -> None:
        self.world.Abort(code)


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (bin/spark-class, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_missing() -> str | None:
    """Why no JVM can start here, or None."""
    if os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        "java is not on this worker's PATH (and JAVA_HOME names none): Spark needs Java 17 "
        "or later (Debian: apt-get install default-jre-headless)"
    )


def bind_address(control: Control) -> str:
    """The address this rank's Spark processes bind to (the module docstring's rule)."""
    hostnames = control.allgather_object(socket.gethostname())
    if all(h == hostnames[0] for h in hostnames):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def memory_share(ranks_here: int) -> int:
    """Megabytes this rank's Spark worker offers: half the memory available on its machine
    (or in its container's limit) divided among the ranks there, at least 512."""
    available = _meminfo_mb("MemAvailable") or 2048
    limit = _cgroup_limit_mb()
    if limit is not None:
        available = min(available, limit)
    return max(512, int(available / 2 / max(ranks_here, 1)))


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


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the rank that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class SparkCluster:
    """This rank's part of the cluster: the master (rank 0) and its worker; `stop` ends them."""

    def __init__(self, control: Control, cores: int, memory_mb: int, work_dir: Path) -> None:
        self.control = control
        self.cores = cores
        self.memory_mb = memory_mb
        self.work_dir = work_dir
        self.conf_dir = work_dir / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG_CONFIG)
        self.host = ""
        self.master_url = ""
        self.master_ui = ""
        self.processes: list[subprocess.Popen] = []

    def environment(self) -> dict[str, str]:
        """The JVMs' environment: this rank's, with Spark's configuration folder and address
        (executors run this Python: PYSPARK_PYTHON)."""
        env = dict(os.environ)
        env.update(
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOCAL_IP=self.host,
            SPARK_HOME=str(spark_home()),
            PYSPARK_PYTHON=sys.executable,
            SPARK_NO_DAEMONIZE="1",
            SPARK_LOCAL_DIRS=str(self.work_dir / "local"),
        )
        return env

    def _start(self, cls: str, *args: str) -> subprocess.Popen:
        command = [str(spark_home() / "bin" / "spark-class"), cls, *args]
        process = subprocess.Popen(
            command,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            cwd=self.work_dir,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl, before exec
        )
        self.processes.append(process)
        return process

    def start(self) -> None:
        """Bring the cluster up on every rank; returns once every worker has registered.

        Every worker offers the smallest of the ranks' cores and memory shares, so that
        the application's executors (one size for all) fit on each of them."""
        self.host = bind_address(self.control)
        shares = self.control.allgather_object((self.cores, self.memory_mb))
        self.cores, self.memory_mb = min(c for c, _ in shares), min(m for _, m in shares)
        if self.control.rank == 0:
            port, ui = free_port(self.host), free_port(self.host)
            self._start(
                "org.apache.spark.deploy.master.Master",
                "--host", self.host, "--port", str(port), "--webui-port", str(ui),
            )  # fmt: skip
            self.master_url, self.master_ui = (
                f"spark://{self.host}:{port}",
                f"http://{self.host}:{ui}",
            )
            self._wait(lambda: _listening(self.host, port), "the Spark master to listen")
        self.master_url, self.master_ui = self.control.bcast_object(
            (self.master_url, self.master_ui)
        )
        self._start(
            "org.apache.spark.deploy.worker.Worker",
            "--host", self.host, "--port", "0", "--webui-port", "0",
            "--cores", str(self.cores), "--memory", f"{self.memory_mb}m",
            "--work-dir", str(self.work_dir / "work"), self.master_url,
        )  # fmt: skip
        if self.control.rank == 0:
            self._wait(
                lambda: self.alive_workers() >= self.control.size,
                f"{self.control.size} Spark worker(s) to register",
            )
        self.control.quiet_barrier(self.check)

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its JSON page)."""
        try:
            with DIRECT.open(f"{self.master_ui}/json/", timeout=2) as reply:
                state = json.load(reply)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise WorkerError(f"waited {START_TIMEOUT:g} s for {what}; see Spark's lines above")
            time.sleep(POLL)

    def check(self) -> None:
        """Raise when one of this rank's JVMs has exited."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"a Spark process of rank {self.control.rank} ({process.args[1]}) exited "
                    f"with code {process.returncode}"
                )

    def stop(self) -> None:
        """Terminate this rank's JVMs (worker first) and wait for them; remove the folder."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def work_dir(run_id: str | None, rank: int) -> Path:
    """A fresh folder for this rank's Spark configuration, worker files and shuffle data."""
    return Path(tempfile.mkdtemp(prefix=f"mlbench-spark-{run_id or 'run'}-{rank}-"))


def _listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False
