"""One Spark run over the ranks: files, cluster, application (rank 0), summary, tear-down.

The application is the rank body every implementation's rank runs (training/rank_body.py:
reporter, set-up, predictions, training, the record), on rank 0 alone, the Spark driver;
`SparkDriver` supplies what Spark does its own way.

Every rank writes the LIBSVM files where missing (data.py) and brings up its part of the
cluster (cluster.py); rank 0 then runs the Spark application (the driver, this process's
pyspark session) while the other ranks wait without spinning, watching their Spark worker;
rank 0 sends the application's exit code to all (a non-blocking broadcast they poll), and
every rank stops its JVMs. A rank that fails otherwise aborts the MPI job (training/entry.py),
which ends the other ranks and, with them, their JVMs (cluster.py: parent-death signal).

The summary is the one record of every implementation (training/run_record.py), with
`implementation` "spark", Spark's and Java's versions, and under `config` what Spark adds: the start-up times kept off the
benchmark clock (cluster, application with its executors, data cached) and the stage
times of Spark's listener over the whole training.
"""

from __future__ import annotations

import os
import subprocess
import time
import warnings
from collections.abc import Callable
from typing import Any

from mlbench_worker.data import synthetic_banner
from mlbench_worker.implementations import engine_ranks
from mlbench_worker.implementations.spark import cluster, data
from mlbench_worker.implementations.spark.train import LbfgsTrainer, SgdTrainer, SparkTrainer
from mlbench_worker.tasks import get_task
from mlbench_worker.tasks.epsilon import GLMS
from mlbench_worker.tasks.epsilon.schedule import plateau_schedule, rates
from mlbench_worker.training import environment, rank_body
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.rank_body import Say, Setup
from mlbench_worker.training.recipe import Goal
from mlbench_worker.training.run_record import RunFacts, comm_shares

EXECUTORS_TIMEOUT = 300.0  # a JVM each, on a busy machine
NOTE = (
    "Spark {spark} standalone cluster over the run's ranks (a master on rank 0, a worker per "
    "rank); the application runs on rank 0. {algorithm}. Equal to the reference: the rows, "
    "labels, shards and their order, the initial model (zero), the penalty, {equal}. Start-up "
    "(cluster, application, data cached) is off the clock; compute is the executors' run time "
    "of the training stages (Spark's listener), comm the rest of each step's wall time."
)
SGD_NOTE = "mini-batch SGD: a broadcast model, the batch gradients tree-aggregated"
SGD_EQUAL = "batch, rates and plateau schedule, torch's SGD update"
LBFGS_NOTE = (
    "MLlib LogisticRegression, L-BFGS ({iterations} iterations an epoch, each fit from the "
    "last model); MLlib does not penalise the intercept"
)


class Solo:
    """The prediction sink's collectives on the Spark driver alone: it holds the whole test
    set's predictions, so nothing is gathered."""

    rank = 0

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        return obj

    def gather_object(self, obj: Any, root: int = 0) -> list | None:
        return [obj]


def run(config: RunConfig, control: engine_ranks.Control) -> int:
    """This rank's part of a Spark run; 0, or raises (see run_main)."""
    task = get_task(config.task)
    rank0 = control.rank == 0

    def say(line: str) -> None:
        if rank0:
            print(line, flush=True)

    engine_ranks.say_unused_options(config, say, "spark", "Spark's broadcast and tree aggregate")
    cores = config.threads or environment.default_threads()
    files = data.write_files(config, task, control, say)
    if files.name == "synthetic":
        synthetic_banner(say, "epsilon", files.note)
    started = time.perf_counter()
    spark_cluster = cluster.SparkCluster(
        control,
        cores,
        cluster.memory_share(engine_ranks.ranks_here()),
        cluster.work_dir(config.run_id, control.rank),
    )
    code = 1
    try:
        spark_cluster.start()
        cluster_seconds = time.perf_counter() - started
        failure: BaseException | None = None
        if rank0:
            try:
                code = application(config, task, spark_cluster, files, cores, cluster_seconds)
            except WorkerError as exc:
                failure, code = exc, exc.exit_code
            except BaseException as exc:  # noqa: BLE001 - reported, then raised below
                failure, code = exc, 1
        code = control.rank0_code(code, spark_cluster.check)
        if failure is not None:
            raise failure
        if code and not rank0:
            raise WorkerError("the Spark application failed on rank 0", exit_code=code)
        return code
    finally:
        spark_cluster.stop()


def application(
    config: RunConfig, task: Any, spark_cluster: cluster.SparkCluster, files: data.Files,
    cores: int, cluster_seconds: float,
) -> int:  # fmt: skip
    """Rank 0: the Spark application from session to summary (the rank body, SparkDriver)."""
    # pyspark warns about pandas it does not use here, once per run: noise in a run's log.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession

    world = spark_cluster.control.size
    os.environ.update(spark_cluster.environment())
    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(spark_cluster.master_url)
        .appName(f"mlbench {config.run_id or ''} {config.task}")
        .config("spark.driver.host", spark_cluster.host)
        .config("spark.driver.bindAddress", spark_cluster.host)
        .config("spark.executor.cores", str(spark_cluster.cores))
        .config("spark.executor.memory", f"{spark_cluster.memory_mb}m")
        .config("spark.cores.max", str(spark_cluster.cores * world))
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(spark_cluster.work_dir / "local"))
        .config("spark.python.worker.reuse", "true")
        .config("spark.default.parallelism", str(world))
        .getOrCreate()
    )
    try:
        wait_for_executors(spark, world)
        session_seconds = time.perf_counter() - t0
        startup = {"cluster": cluster_seconds, "application": session_seconds}
        return rank_body.run(config, SparkDriver(config, task, spark, files, world, cores, startup))
    finally:
        spark.stop()


def wait_for_executors(spark: Any, world: int) -> None:
    """Until one executor per rank has registered (the driver counts as one more)."""
    deadline = time.monotonic() + EXECUTORS_TIMEOUT
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() < world + 1:
        if time.monotonic() > deadline:
            raise WorkerError(f"{world} Spark executors did not register within "
                              f"{EXECUTORS_TIMEOUT:g} s")  # fmt: skip
        time.sleep(engine_ranks.POLL)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()


class SparkDriver:
    """The Spark implementation's parts of the rank body (rank_body.Implementation), on the
    driver, which holds the whole test set's predictions (Solo) and alone reports."""

    rank = 0
    collectives = Solo()

    def __init__(
        self, config: RunConfig, task: Any, spark: Any, files: data.Files, world: int,
        cores: int, startup: dict[str, float],
    ) -> None:  # fmt: skip
        self.config, self.task, self.spark, self.files = config, task, spark, files
        self.world, self.cores, self.startup = world, cores, startup

    def build(self, say: Say, open_reporter: Callable[[], Reporter]) -> Setup:
        config, task, spark, files = self.config, self.task, self.spark, self.files
        world = self.world
        t0 = time.perf_counter()
        train_blocks = data.cached_blocks(spark, files, "train", world, config.seed)
        test_blocks = data.cached_blocks(spark, files, "test", world, config.seed)
        self.l2 = task.l2 if config.l2 is None else config.l2
        goal = Goal(config.target, task.target_accuracy(config.target), config.max_epochs,
                    config.time_budget)  # fmt: skip
        reporter = open_reporter()
        shard_rows = files.train_rows // world
        common = dict(
            features=files.features, world=world, throughput_metric="samples_per_sec",
            throughput_unit="samples/s", log_every=config.log_every, say=say,
        )  # fmt: skip
        self.trainer: SparkTrainer
        if config.algorithm == "lbfgs":
            iterations = int(config.algorithm_options["iterations"])
            self.trainer = LbfgsTrainer(
                spark, test_blocks, goal, reporter,
                train_frame=data.labelled_frame(spark, train_blocks),
                train_rows=shard_rows * world, iterations=iterations, l2=self.l2, **common,
            )  # fmt: skip
            self.described, self.equal = LBFGS_NOTE.format(iterations=iterations), ""
            self.floor_lr, self.peak_lr = 0.0, 0.0
        else:
            self.floor_lr, self.peak_lr = rates(
                task, GLMS[config.model], config.batch_size, world, config.lr
            )
            schedule = plateau_schedule(
                self.peak_lr, self.floor_lr, task.plateau_factor, task.plateau_threshold
            )
            self.trainer = SgdTrainer(
                spark, test_blocks, goal, reporter, train_blocks=train_blocks,
                shard_rows=shard_rows, batch_size=config.batch_size, seed=config.seed,
                schedule=schedule, l2=self.l2, **common,
            )  # fmt: skip
            self.described, self.equal = SGD_NOTE, SGD_EQUAL
        self.startup["data"] = time.perf_counter() - t0
        return Setup(self.trainer, files.name)

    def before_training(self, say: Say) -> None:
        pass

    def headline(self) -> str:
        import pyspark

        config, files, startup = self.config, self.files, self.startup
        goal, lbfgs = self.trainer.goal, config.algorithm == "lbfgs"
        return (
            f"{self.task.name}: model {config.model}, data {files.name} ({files.train_rows} "
            f"train / {files.test_rows} test samples, {files.features} features), "
            f"{self.world} worker(s), implementation spark (Spark {pyspark.__version__}, "
            f"standalone), {self.cores} core(s)/rank, algorithm {config.algorithm}"
            + ("" if lbfgs else f", batch {config.batch_size}/worker, peak lr {self.peak_lr:g}")
            + f", target {config.target} ({goal.accuracy:.0%}), max {goal.max_epochs} epochs; "
            f"start-up {startup['cluster']:.1f} s cluster, {startup['application']:.1f} s "
            f"application, {startup['data']:.1f} s data"
        )

    def facts(self, progress: Progress) -> RunFacts:
        import pyspark

        trainer, files, spark = self.trainer, self.files, self.spark
        trainer.stage_times.read()
        share, _ = comm_shares(progress.time_data, progress.time_compute, progress.time_comm)
        return RunFacts(
            dataset=files.name,
            dataset_note=files.note,
            num_workers=self.world,
            backend="spark",
            device="cpu",
            threads=self.cores,
            peak_lr=self.peak_lr,
            comm_share=share,
            comm_share_total=share,
            comm_bytes_per_step=float(trainer.step_bytes),
            # The driver keeps one progress for the job: its bytes are one rank's.
            comm_bytes_to_target=progress.comm_bytes_at_target,
            full_allreduce_bytes=4 * (files.features + 1),
            versions=environment.versions(
                {"pyspark": pyspark.__version__, "spark": spark.version, "java": java_version()}
            ),
            hardware=environment.host_hardware(self.cores, [environment.hostname()] * self.world),
            config={
                "floor_lr": self.floor_lr,
                "l2": self.l2,
                "train_samples": files.train_rows,
                "test_samples": files.test_rows,
                "features": files.features,
                "spark_startup_seconds": {k: round(v, 3) for k, v in self.startup.items()},
                "spark_stage_seconds": {
                    k: round(v, 3) for k, v in trainer.stage_times.totals.items()
                },
            },
            implementation_note=NOTE.format(
                spark=spark.version,
                algorithm=self.described,
                equal=self.equal or "the goal tracking",
            ),
        )

    def footer(self, summary: dict) -> str:
        return ""

    def export(self) -> None:
        """Nothing: the Spark implementation hands over no model (its predictions are graded)."""


def java_version() -> str:
    """The JVM's version line (`java -version` prints it on stderr)."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else ""
