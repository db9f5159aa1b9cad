"""One Flink run over the ranks: data, cluster, the application (rank 0), summary, tear-down.

The application is the rank body every implementation's rank runs (training/rank_body.py),
on rank 0 alone, Flink's client; `FlinkDriver` supplies what Flink does its own way. Every
rank brings up its part of the cluster (flink_cluster.py); rank 0 then submits the training
job and runs the loop (flink_train.py) while the other ranks wait without spinning, watching
their TaskManager; rank 0 sends the application's exit code to all (a non-blocking broadcast
they poll) and every rank stops its JVMs. A rank that fails otherwise aborts the MPI job
(training/entry.py), which ends the other ranks and, with them, their JVMs.

The data: the generated set's blocks are made by the subtasks themselves where missing (the
rows the reference rank of the same number makes); epsilon's rows come from the reference's
cache (tasks/epsilon/reader.py), which rank 0 prepares as the reference does, each subtask
reading its rank's rows into a block (flink_job.ensure_block). Blocks live where Spark's do
(implementations/spark/blocks.py), in a folder of their own.

The summary is the one record of every implementation (training/run_record.py) with
`implementation` "flink", PyFlink's and Java's versions and, under `config`, the start-up
kept off the benchmark clock (`flink_startup_seconds`: cluster, job, data).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlbench_worker.data import DataUnavailable, synthetic_banner
from mlbench_worker.implementations import engine_ranks
from mlbench_worker.implementations.flink import flink_cluster
from mlbench_worker.implementations.flink.flink_train import FlinkTrainer, TrainingJob
from mlbench_worker.implementations.spark import blocks
from mlbench_worker.tasks import get_task
from mlbench_worker.tasks.epsilon import GLMS, reader
from mlbench_worker.tasks.epsilon.schedule import plateau_schedule, rates
from mlbench_worker.training import environment, rank_body
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.rank_body import Say, Setup
from mlbench_worker.training.recipe import Goal
from mlbench_worker.training.run_record import RunFacts, comm_shares

BLOCKS = "flink-blocks"
NOTE = (
    "Flink {flink} standalone cluster over the run's ranks (a JobManager on rank 0, a "
    "TaskManager per rank); one streaming job for the run, its client on rank 0. Mini-batch "
    "SGD: the model sent into the job through Flink's socket source, broadcast to a subtask "
    "per rank, the batch gradients combined by a keyed stream and collected by the client, "
    "which updates. Equal to the reference: the rows, labels, shards and their order, the "
    "initial model (zero), the penalty, batch, rates and plateau schedule, torch's SGD update. "
    "Start-up (cluster, job, data) is off the clock; compute is the slowest subtask's "
    "arithmetic, comm the rest of each step's wall time."
)


def run(config: RunConfig, control: engine_ranks.Control) -> int:
    """This rank's part of a Flink run; 0, or raises (see run_main)."""
    task = get_task(config.task)
    rank0 = control.rank == 0

    def say(line: str) -> None:
        if rank0:
            print(line, flush=True)

    engine_ranks.say_unused_options(config, say, "flink", "Flink's broadcast and keyed streams")
    cores = config.threads or environment.default_threads()
    data = Data.agree(config, task, control, say)
    if data.name == "synthetic":
        synthetic_banner(say, "epsilon", data.note)
    started = time.perf_counter()
    cluster = flink_cluster.FlinkCluster(
        control, cores, flink_cluster.memory_share(engine_ranks.ranks_here()),
        flink_cluster.work_dir(config.run_id, control.rank),
    )  # fmt: skip
    code = 1
    try:
        cluster.start()
        cluster_seconds = time.perf_counter() - started
        failure: BaseException | None = None
        if rank0:
            driver = FlinkDriver(config, task, cluster, data, cores, cluster_seconds)
            try:
                code = rank_body.run(config, driver)
            except WorkerError as exc:
                failure, code = exc, exc.exit_code
            except BaseException as exc:  # noqa: BLE001 - reported, then raised below
                failure, code = exc, 1
            finally:
                driver.close()
        code = control.rank0_code(code, cluster.check)
        if failure is not None:
            raise failure
        if code and not rank0:
            raise WorkerError("the Flink application failed on rank 0", exit_code=code)
        return code
    finally:
        cluster.stop()


def choose(config: RunConfig, control: Any, features: int, say: Say) -> str:
    """Which set the run uses, agreed by every rank (the spark implementation's rule): rank 0
    tries epsilon (reader.prepare: cache, text, download); `auto` falls back to the
    generated set. The reason of a fallback, or "" (epsilon), or "synthetic" as asked."""
    if config.dataset == "synthetic":
        return "synthetic"
    why = ""
    if control.rank == 0:
        try:
            reader.prepare(Path(config.data_dir), features=features, say=say)
        except (DataUnavailable, WorkerError) as exc:
            why = str(exc) or type(exc).__name__
    why = control.bcast_object(why)
    if why and config.dataset != "auto":
        raise WorkerError(f"--dataset {config.dataset}: {why}", exit_code=1)
    return f"epsilon could not be had: {why}" if why else ""


class Solo:
    """The prediction sink's collectives on the client alone: it holds the whole test set's
    predictions, so nothing is gathered."""

    rank = 0

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        return obj

    def gather_object(self, obj: Any, root: int = 0) -> list | None:
        return [obj]


class Data:
    """The run's rows as the subtasks find them: the set's name, sizes, where the blocks
    go, and epsilon's cache folder (None: the generated set)."""

    def __init__(self, name: str, train_rows: int, test_rows: int, features: int,
                 folder: Path, epsilon_dir: str | None, note: str = "") -> None:  # fmt: skip
        self.name, self.train_rows, self.test_rows = name, train_rows, test_rows
        self.features, self.folder, self.epsilon_dir, self.note = (
            features,
            folder,
            epsilon_dir,
            note,
        )

    @classmethod
    def agree(cls, config: RunConfig, task: Any, control: Any, say: Say) -> Data:
        """The set every rank uses (spark/data.choose: epsilon, or the generated set)."""
        choice = choose(config, control, task.features, say)
        data_dir = Path(config.data_dir)
        if choice != "":
            n_train = config.train_images or task.train_rows
            n_test = config.test_images or task.test_rows
            epsilon_dir, name = None, "synthetic"
        else:
            infos = {s: reader.read_info(data_dir, s) for s in reader.SPLITS}
            n_train = min(infos[reader.TRAIN].rows, config.train_images or infos[reader.TRAIN].rows)
            n_test = min(infos[reader.TEST].rows, config.test_images or infos[reader.TEST].rows)
            epsilon_dir, name = str(data_dir), "epsilon"
        if n_train < control.size:
            raise WorkerError(f"the training set has {n_train} rows, fewer than the "
                              f"{control.size} workers: every worker needs at least one")  # fmt: skip
        folder = data_dir / BLOCKS / f"{name}-seed{config.seed}-{n_train}x{n_test}"
        note = "" if choice in ("", "synthetic") else choice
        return cls(name, n_train, n_test, task.features, folder, epsilon_dir, note)

    def specs(self, split: str, world: int, seed: int) -> list[blocks.BlockSpec]:
        total = self.train_rows if split == reader.TRAIN else self.test_rows
        generated = None if self.epsilon_dir else (seed, total, self.features)
        return [
            blocks.BlockSpec(str(self.folder), split, r, world, generated) for r in range(world)
        ]


class FlinkDriver:
    """The Flink implementation's parts of the rank body (rank_body.Implementation), on the
    client, which holds the whole test set's predictions (Solo) and alone reports."""

    rank = 0
    collectives = Solo()

    def __init__(self, config: RunConfig, task: Any, cluster: flink_cluster.FlinkCluster,
                 data: Data, cores: int, cluster_seconds: float) -> None:  # fmt: skip
        self.config, self.task, self.cluster, self.data = config, task, cluster, data
        self.world, self.cores = cluster.control.size, cores
        self.startup = {"cluster": cluster_seconds}
        self.job: TrainingJob | None = None

    def build(self, say: Say, open_reporter: Callable[[], Reporter]) -> Setup:
        config, task, data, world = self.config, self.task, self.data, self.world
        from mlbench_worker.implementations.flink.flink_job import Subtask  # imports pyflink

        os.environ.update(self.cluster.environment())  # the client's JVM reads the same
        t0 = time.perf_counter()
        subtask = Subtask(
            data.specs(reader.TRAIN, world, config.seed), data.specs(reader.TEST, world, config.seed),
            (data.train_rows, data.test_rows), config.seed, config.batch_size, data.epsilon_dir,
        )  # fmt: skip
        host, _, rest = self.cluster.jobmanager
        settings = {
            "python.executable": sys.executable,
            "pipeline.name": f"mlbench {config.run_id or ''}",
        }
        self.job = TrainingJob((host, rest), self.cluster.host, world, subtask, settings,
                               f"mlbench {config.run_id or ''} {config.task}")  # fmt: skip
        self.startup["job"] = time.perf_counter() - t0
        self.l2 = task.l2 if config.l2 is None else config.l2
        self.floor_lr, self.peak_lr = rates(
            task, GLMS[config.model], config.batch_size, world, config.lr
        )
        goal = Goal(config.target, task.target_accuracy(config.target), config.max_epochs,
                    config.time_budget)  # fmt: skip
        self.trainer = FlinkTrainer(
            self.job, goal, open_reporter(), features=data.features, world=world,
            shard_rows=data.train_rows // world, batch_size=config.batch_size,
            schedule=plateau_schedule(self.peak_lr, self.floor_lr, task.plateau_factor,
                                      task.plateau_threshold),
            l2=self.l2, log_every=config.log_every, say=say,
        )  # fmt: skip
        t0 = time.perf_counter()
        self.trainer.warm()
        self.startup["data"] = time.perf_counter() - t0
        return Setup(self.trainer, data.name)

    def before_training(self, say: Say) -> None:
        pass

    def headline(self) -> str:
        config, data, startup, goal = self.config, self.data, self.startup, self.trainer.goal
        return (
            f"{self.task.name}: model {config.model}, data {data.name} ({data.train_rows} "
            f"train / {data.test_rows} test samples, {data.features} features), "
            f"{self.world} worker(s), implementation flink (Flink {flink_version()}, "
            f"standalone), {self.cores} core(s)/rank, algorithm {config.algorithm}, batch "
            f"{config.batch_size}/worker, peak lr {self.peak_lr:g}, target {config.target} "
            f"({goal.accuracy:.0%}), max {goal.max_epochs} epochs; start-up "
            f"{startup['cluster']:.1f} s cluster, {startup['job']:.1f} s job, "
            f"{startup['data']:.1f} s data"
        )

    def facts(self, progress: Progress) -> RunFacts:
        trainer, data = self.trainer, self.data
        share, _ = comm_shares(progress.time_data, progress.time_compute, progress.time_comm)
        version = flink_version()
        return RunFacts(
            dataset=data.name, dataset_note=data.note, num_workers=self.world, backend="flink",
            device="cpu", threads=self.cores, peak_lr=self.peak_lr, comm_share=share,
            comm_share_total=share, comm_bytes_per_step=float(trainer.step_bytes),
            # The client keeps one progress for the job: its bytes are one rank's.
            comm_bytes_to_target=progress.comm_bytes_at_target,
            full_allreduce_bytes=4 * (data.features + 1),
            versions=environment.versions(
                {"pyflink": version, "flink": version, "java": java_version()}
            ),
            hardware=environment.host_hardware(self.cores, [environment.hostname()] * self.world),
            config={
                "floor_lr": self.floor_lr, "l2": self.l2, "train_samples": data.train_rows,
                "test_samples": data.test_rows, "features": data.features,
                "flink_startup_seconds": {k: round(v, 3) for k, v in self.startup.items()},
            },
            implementation_note=NOTE.format(flink=version),
        )  # fmt: skip

    def footer(self, summary: dict) -> str:
        return ""

    def export(self) -> None:
        """Nothing: the Flink implementation hands over no model (its predictions are graded)."""

    def close(self) -> None:
        """End the job, before the ranks stop their JVMs."""
        if self.job is not None:
            self.job.close()
            self.job = None


def flink_version() -> str:
    from pyflink.version import __version__

    return __version__


def java_version() -> str:
    """The JVM's version line (`java -version` prints it on stderr)."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else ""
