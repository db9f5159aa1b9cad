"""A Flink standalone cluster over the ranks mpirun started: the JobManager on rank 0, one
TaskManager on every rank with one slot, the rank's cores and a share of its machine's memory.

Why inside the ranks, as Spark's (implementations/spark/cluster.py): the drivers (local slots,
Slurm, Kubernetes) already start one process per worker where the run's resources, network
shaping and cancellation apply; the JVMs a rank starts live in the same slot, node or pod and
bind to the address the rank uses (loopback when every rank is on one host, else the address
its host name resolves to), on ports free there, so Flink's traffic crosses the links MPI's
would. MPI only coordinates: the JobManager's address goes out by broadcast, barriers order
start and stop; no training data goes through it.

Everything of the cluster lives in one folder of the rank's own (`work_dir`, under TMPDIR,
named after the run): its configuration, its JARs (Flink's lib/ beside flink-python, so
Python operators run), the JVMs' pid files, logs and temporary files. No JVM may outlive its
rank: each is started with the kernel's parent-death signal (PR_SET_PDEATHSIG = SIGKILL)
through Flink's own `jobmanager.sh`/`taskmanager.sh start-foreground`, which exec the JVM
in place; the Python workers a TaskManager starts end with it; the client's JVM (PyFlink's
gateway, rank 0) ends when its Python's pipe closes. On a normal end, `stop` terminates them,
waits, and removes the folder. Their logs go to the rank's stderr at WARN.
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

# Flink's REST API is on the ranks' addresses: never through a proxy the environment names
# for downloads (the local driver's slots have one).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

START_TIMEOUT = 300.0  # seconds for the JobManager to answer and every TaskManager to register
POLL = 0.2
_PR_SET_PDEATHSIG = 1
# Extra options of every JVM of the cluster (the tests' short runs: C1 only, serial GC).
JAVA_OPTS_VARIABLE = "MLBENCH_FLINK_JAVA_OPTS"
LOG_CONFIG = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = flink %d{HH:mm:ss} %p %c{1}: %m%n
logger.netty.name = org.jboss.netty.channel.DefaultChannelPipeline
logger.netty.level = off
logger.python.name = PythonWorker
logger.python.level = error
"""


class Control:
    """MPI's COMM_WORLD for coordination only: who is rank 0, the JobManager's address,
    barriers that wait without spinning (a waiting rank leaves its cores to Flink)."""

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


def flink_home() -> Path:
    """The Flink distribution inside the pyflink package (bin/, lib/, opt/)."""
    import pyflink

    return Path(pyflink.__file__).resolve().parent


def shipped_java_opts() -> str:
    """The JVM options of the configuration Flink ships (the modules Java 17 must open to
    Flink: the client's and the cluster's JVMs fail without them), which a configuration
    of our own replaces unless it repeats them."""
    for line in (flink_home() / "conf" / "config.yaml").read_text().splitlines():
        key, _, value = line.strip().partition(":")
        if key == "all" and value.strip().startswith("--add-"):
            return value.strip()
    return ""


def java_missing() -> str | None:
    """Why no JVM can start here, or None."""
    if os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        "java is not on this worker's PATH (and JAVA_HOME names none): Flink needs Java 17 "
        "or later (Debian: apt-get install default-jre-headless)"
    )


def bind_address(control: Control) -> str:
    """The address this rank's Flink processes bind to (the module docstring's rule)."""
    hostnames = control.allgather_object(socket.gethostname())
    if all(h == hostnames[0] for h in hostnames):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def memory_share(ranks_here: int) -> int:
    """Megabytes of this rank's TaskManager process: half the memory available on its
    machine (or its container's limit) divided among the ranks there, 1,024 at least (a
    TaskManager's fixed parts need most of that)."""
    available = _meminfo_mb("MemAvailable") or 4096
    limit = _cgroup_limit_mb()
    if limit is not None:
        available = min(available, limit)
    return max(1024, min(4096, int(available / 2 / max(ranks_here, 1))))


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


class FlinkCluster:
    """This rank's part of the cluster: the JobManager (rank 0) and its TaskManager."""

    def __init__(self, control: Control, cores: int, memory_mb: int, work_dir: Path) -> None:
        self.control = control
        self.cores = cores
        self.memory_mb = memory_mb
        self.work_dir = work_dir
        self.conf_dir = work_dir / "conf"
        self.host = ""
        self.rest_url = ""
        self.jobmanager: tuple[str, int, int] = ("", 0, 0)  # host, RPC port, REST port
        self.processes: list[subprocess.Popen] = []

    def environment(self) -> dict[str, str]:
        """The JVMs' environment: this rank's, with the cluster's folders (Flink's scripts
        read them) and the Python its Python workers run."""
        env = dict(os.environ)
        env.update(
            FLINK_CONF_DIR=str(self.conf_dir),
            FLINK_LIB_DIR=str(self.work_dir / "lib"),
            FLINK_LOG_DIR=str(self.work_dir / "log"),
            FLINK_PID_DIR=str(self.work_dir / "pid"),
            FLINK_HOME=str(flink_home()),
            PYFLINK_CLIENT_EXECUTABLE=sys.executable,
        )
        return env

    def write_config(self) -> None:
        """conf/config.yaml for this rank's JVMs and the client, the WARN log
        configuration, and lib/: Flink's JARs with flink-python beside them."""
        home = flink_home()
        host, rpc, rest = self.jobmanager
        for folder in ("conf", "lib", "log", "pid", "tmp"):
            (self.work_dir / folder).mkdir(parents=True, exist_ok=True)
        for jar in [*(home / "lib").glob("*.jar"), *(home / "opt").glob("flink-python-*.jar")]:
            link = self.work_dir / "lib" / jar.name
            if not link.exists():
                link.symlink_to(jar)
        settings = {
            "jobmanager.rpc.address": host,
            "jobmanager.rpc.port": rpc,
            "jobmanager.bind-host": self.host,
            "jobmanager.memory.process.size": "1024m",
            "rest.address": host,
            "rest.bind-address": self.host,
            "rest.port": rest,
            "taskmanager.host": self.host,
            "taskmanager.bind-host": self.host,
            "taskmanager.rpc.port": 0,
            "taskmanager.data.port": 0,
            "blob.server.port": 0,
            "taskmanager.numberOfTaskSlots": 1,
            "taskmanager.cpu.cores": self.cores,
            "taskmanager.memory.process.size": f"{self.memory_mb}m",
            "io.tmp.dirs": str(self.work_dir / "tmp"),
            "web.tmpdir": str(self.work_dir / "tmp"),
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            "env.java.opts.all": f"{shipped_java_opts()} {os.environ.get(JAVA_OPTS_VARIABLE, '')}",
        }
        self.conf_dir.joinpath("config.yaml").write_text(
            "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())
        )
        for name in ("log4j-console.properties", "log4j-cli.properties", "log4j.properties"):
            self.conf_dir.joinpath(name).write_text(LOG_CONFIG)

    def _start(self, script: str) -> subprocess.Popen:
        process = subprocess.Popen(
            ["bash", str(flink_home() / "bin" / script), "start-foreground"],
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            cwd=self.work_dir,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl, before exec
        )
        self.processes.append(process)
        return process

    def start(self) -> None:
        """Bring the cluster up on every rank; returns once every TaskManager has
        registered. Every TaskManager offers the smallest of the ranks' cores and memory
        shares, so the job's subtasks meet equal machines."""
        self.host = bind_address(self.control)
        shares = self.control.allgather_object((self.cores, self.memory_mb))
        self.cores, self.memory_mb = min(c for c, _ in shares), min(m for _, m in shares)
        if self.control.rank == 0:
            self.jobmanager = (self.host, free_port(self.host), free_port(self.host))
        self.jobmanager = self.control.bcast_object(self.jobmanager)
        host, _, rest = self.jobmanager
        self.rest_url = f"http://{host}:{rest}"
        self.write_config()
        if self.control.rank == 0:
            self._start("jobmanager.sh")
            self._wait(lambda: self.registered() >= 0, "the Flink JobManager to answer")
        self.control.quiet_barrier(self.check)
        self._start("taskmanager.sh")
        if self.control.rank == 0:
            self._wait(
                lambda: self.registered() >= self.control.size,
                f"{self.control.size} Flink TaskManager(s) to register",
            )
        self.control.quiet_barrier(self.check)

    def registered(self) -> int:
        """TaskManagers the JobManager lists (its REST API), -1 while it does not answer."""
        try:
            with DIRECT.open(f"{self.rest_url}/taskmanagers", timeout=2) as reply:
                return len(json.load(reply).get("taskmanagers", []))
        except (OSError, ValueError):
            return -1

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise WorkerError(f"waited {START_TIMEOUT:g} s for {what}; see Flink's lines above")
            time.sleep(POLL)

    def check(self) -> None:
        """Raise when one of this rank's JVMs has exited."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"a Flink process of rank {self.control.rank} ({Path(process.args[1]).stem}) "
                    f"exited with code {process.returncode}"
                )

    def stop(self) -> None:
        """Terminate this rank's JVMs (TaskManager first) and wait; remove the folder."""
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


PREFIX = "mlbench-flink-"


def work_dir(run_id: str | None, rank: int) -> Path:
    """A fresh folder for everything of this rank's Flink processes (module docstring),
    named after the run, the rank and this process; first, the folders that ranks killed
    before their `stop` left here are removed (their process is gone, and with it their
    JVMs: the parent-death signal)."""
    sweep_leftovers(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{run_id or 'run'}-{rank}-{os.getpid()}-"))


def sweep_leftovers(folder: Path) -> list[Path]:
    """Remove the rank folders under `folder` whose process no longer exists; the removed."""
    removed = []
    for path in folder.glob(f"{PREFIX}*"):
        parts = path.name.removeprefix(PREFIX).rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit() or Path(f"/proc/{parts[1]}").exists():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
