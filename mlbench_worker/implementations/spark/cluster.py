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

import json
import os
import sys
import tempfile
from pathlib import Path

from mlbench_worker.implementations import engine_ranks
from mlbench_worker.implementations.engine_ranks import DIRECT, Control, bind_address, listening
from mlbench_worker.shared.localhost import free_port

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


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (bin/spark-class, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def memory_share(ranks_here: int) -> int:
    """Megabytes this rank's Spark worker offers: half the memory available on its machine
    (or in its container's limit) divided among the ranks there, at least 512."""
    return max(512, int(engine_ranks.available_memory_mb(2048) / 2 / max(ranks_here, 1)))


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
        self.processes = engine_ranks.RankProcesses("Spark", control.rank, work_dir)

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

    def _start(self, cls: str, *args: str) -> None:
        command = [str(spark_home() / "bin" / "spark-class"), cls, *args]
        self.processes.start(command, self.environment(), cls)

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
            self.processes.wait_for(
                lambda: listening(self.host, port), "the Spark master to listen"
            )
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
            self.processes.wait_for(
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

    def check(self) -> None:
        """Raise when one of this rank's JVMs has exited."""
        self.processes.check()

    def stop(self) -> None:
        """Terminate this rank's JVMs (worker first) and wait for them; remove the folder."""
        self.processes.stop()


def work_dir(run_id: str | None, rank: int) -> Path:
    """A fresh folder for this rank's Spark configuration, worker files and shuffle data."""
    return Path(tempfile.mkdtemp(prefix=f"mlbench-spark-{run_id or 'run'}-{rank}-"))
