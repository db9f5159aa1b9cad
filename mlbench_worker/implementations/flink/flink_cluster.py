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

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from mlbench_worker.implementations import engine_ranks
from mlbench_worker.implementations.engine_ranks import DIRECT, Control, bind_address
from mlbench_worker.shared.localhost import free_port

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


def memory_share(ranks_here: int) -> int:
    """Megabytes of this rank's TaskManager process: half the memory available on its
    machine (or its container's limit) divided among the ranks there, 1,024 at least (a
    TaskManager's fixed parts need most of that)."""
    available = engine_ranks.available_memory_mb(4096)
    return max(1024, min(4096, int(available / 2 / max(ranks_here, 1))))


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
        self.processes = engine_ranks.RankProcesses("Flink", control.rank, work_dir)

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

    def _start(self, script: str) -> None:
        command = ["bash", str(flink_home() / "bin" / script), "start-foreground"]
        self.processes.start(command, self.environment(), Path(script).stem, stdout=sys.stderr)

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
            self.processes.wait_for(
                lambda: self.registered() >= 0, "the Flink JobManager to answer"
            )
        self.control.quiet_barrier(self.check)
        self._start("taskmanager.sh")
        if self.control.rank == 0:
            self.processes.wait_for(
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

    def check(self) -> None:
        """Raise when one of this rank's JVMs has exited."""
        self.processes.check()

    def stop(self) -> None:
        """Terminate this rank's JVMs (TaskManager first) and wait; remove the folder."""
        self.processes.stop()


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
