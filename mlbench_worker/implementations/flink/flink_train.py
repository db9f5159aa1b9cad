"""The Flink application's training loop (rank 0 is Flink's client): the reference's
mini-batch SGD on PyFlink's DataStream API, with the clock, evaluation, goal tracking,
metric names and stopping of every implementation (training/progress.py).

Why one streaming job for the whole run, and not a job per step or per epoch. The reference
takes one synchronous step per batch: every rank's gradient of the same model, averaged,
then the update, thousands of times a run. Flink 2.x has no iterations any more (DataSet and
`DataStream.iterate` went in 2.0, and Flink ML, whose iteration library replaced them, is
dormant and does not install beside PyFlink 2.x), so a job cannot feed a model back to its
own subtasks. A bounded job per step costs 5 to 8 s of scheduling and Python start-up here
against a step's millisecond of arithmetic; a job per epoch could not take the reference's
steps at all (it would average models, another algorithm). So one unbounded job runs for the
whole run and the loop is closed where a Flink user closes it, outside the job: the client
sends each step's model into the job through Flink's socket source, the job broadcasts it to
one subtask per rank, each computes its rank's batch gradient on the rows it holds, a keyed
stream combines the K gradients (the all-reduce), and the sum comes back to the client
through `execute_and_collect` (Flink's collect sink); the client applies torch's SGD update
with weight decay, theta -= lr (g + lambda theta), at the rate of the reference's plateau
schedule, and sends the next model. Evaluations go through the same job. What it costs: a
round trip through two network hops and two Python operators per step (about 0.1 s here),
Python UDFs in bundles of one element so that nothing waits for a bundle to fill, and
network buffers flushed at once (`execution.buffer-timeout.interval` 0); the job's start-up
(submission, the Python workers, the blocks loaded) is paid once, off the clock.

The benchmark clock starts at the first step, after the cluster, the job and the data are up
(reported apart as start-up). A step's time is split as Spark's is: compute is the slowest
rank's arithmetic (each subtask times its own work and returns the seconds in its slot of
the gradient vector, blocks.batch_gradient), communication the rest of the step's wall time
on the client (the model in, the broadcast, the combine, the result out); data is 0.
"""

from __future__ import annotations

import itertools
import math
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mlbench_worker.implementations.spark import blocks
from mlbench_worker.shared.evaluation.predictions import LABEL
from mlbench_worker.tasks.epsilon.schedule import PlateauSchedule
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.prediction_sink import PredictionSink, Shard
from mlbench_worker.training.progress import (
    LOG_SECONDS,
    Progress,
    post_report,
    record_evaluation,
    run_epochs,
)
from mlbench_worker.training.recipe import Goal

CONNECT_TIMEOUT = 300.0  # for the job's source to connect (scheduling on a busy machine)
# The job's settings beyond the cluster's (the module docstring says why).
JOB_SETTINGS = {
    "python.fn-execution.bundle.size": "1",
    "python.fn-execution.bundle.time": "1",
    "execution.buffer-timeout.interval": "0 ms",
    "restart-strategy.type": "none",  # a failed subtask fails the run, as a failed rank does
}


class TrainingJob:
    """The run's streaming job on the cluster (module docstring): `ask` sends a command
    and returns the combined answer."""

    def __init__(self, rest: tuple[str, int], host: str, world: int, subtask: Any,
                 settings: dict[str, str], name: str) -> None:  # fmt: skip
        """Submit the job (its `subtask`: a flink_job.Subtask) and wait for its source."""
        from pyflink.common import Types
        from pyflink.datastream import StreamExecutionEnvironment
        from pyflink.datastream.functions import SourceFunction
        from pyflink.java_gateway import get_gateway

        from mlbench_worker.implementations.flink.flink_job import Combine

        gateway = get_gateway()
        conf = gateway.jvm.org.apache.flink.configuration.Configuration()
        for key, value in {**settings, **JOB_SETTINGS, "parallelism.default": str(world)}.items():
            conf.setString(key, value)
        jvm_env = gateway.jvm.org.apache.flink.streaming.api.environment.StreamExecutionEnvironment
        env = StreamExecutionEnvironment(
            jvm_env.createRemoteEnvironment(rest[0], rest[1], conf, gateway.new_array(gateway.jvm.String, 0))
        )  # fmt: skip
        self.server = socket.create_server((host, 0))
        self.server.settimeout(CONNECT_TIMEOUT)
        port = self.server.getsockname()[1]
        socket_source = gateway.jvm.org.apache.flink.streaming.api.functions.source.legacy
        models = env.add_source(
            SourceFunction(socket_source.SocketTextStreamFunction(host, port, "\n", 0)),
            "models from the client", Types.STRING(),
        ).set_parallelism(1)  # fmt: skip
        parts = models.broadcast().flat_map(subtask).name("rank parts").set_parallelism(world)
        combined = parts.key_by(lambda part: part[0], key_type=Types.LONG()).process(
            Combine(world)
        ).name("combine").set_parallelism(1)  # fmt: skip
        self.results = combined.execute_and_collect(name)
        try:
            self.connection, _ = self.server.accept()
        except TimeoutError:
            raise WorkerError(
                f"the Flink job's source did not connect within {CONNECT_TIMEOUT:g} s"
            ) from None
        self.ids = itertools.count()

    def ask(self, header: dict, theta: np.ndarray) -> Any:
        """Send one command; the combined answer (flink_job.Combine)."""
        from mlbench_worker.implementations.flink.flink_job import command

        ident = next(self.ids)
        self.connection.sendall(command({**header, "id": ident}, theta).encode())
        try:
            answer = next(self.results)
        except StopIteration:
            raise RuntimeError("the Flink job ended before answering") from None
        except Exception as exc:  # noqa: BLE001 - py4j's error, reduced to Flink's cause
            raise RuntimeError(f"the Flink job failed: {root_cause(exc)}") from None
        if answer[0] != ident:
            raise RuntimeError(f"the Flink job answered command {answer[0]}, not {ident}")
        return answer[2]

    def close(self) -> None:
        """End the job (its source's connection closes, the collect iterator cancels it)."""
        for closing in (self.connection.close, self.server.close, self.results.close):
            try:
                closing()
            except Exception:  # noqa: BLE001, S112 - ending what may be gone already
                continue


def root_cause(exc: BaseException) -> str:
    """The innermost Java cause's line of a py4j error, else the error's first line."""
    java = getattr(exc, "java_exception", None)
    while java is not None and java.getCause() is not None:
        java = java.getCause()
    text = str(java.toString()) if java is not None else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0]


class FlinkTrainer:
    """Rank 0's Flink application: `fit()` runs the benchmark (module docstring)."""

    def __init__(
        self, job: TrainingJob, goal: Goal, reporter: Reporter, *, features: int, world: int,
        shard_rows: int, batch_size: int, schedule: PlateauSchedule, l2: float, log_every: int,
        say: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.job, self.goal, self.reporter = job, goal, reporter
        self.world = world
        self.theta = np.zeros(features + 1, np.float32)  # the reference's start: zero
        self.batch_size = batch_size
        self.schedule = schedule
        self.l2 = l2
        self.log_every = log_every
        self.say = say
        self.steps_per_epoch = -(-shard_rows // batch_size)
        self.progress = Progress()
        self.clock_start: float | None = None
        self.predictions: PredictionSink | None = None
        self.lr = 0.0
        # Per rank and step: the model in (float32) and its gradient vector out (float64).
        self.step_bytes = (4 + 8) * self.theta.size if world > 1 else 0

    def warm(self) -> float:
        """Every subtask's blocks loaded (made where missing) and its Python worker up,
        before the clock; the slowest subtask's seconds."""
        return float(max(self.job.ask({"kind": "warm"}, self.theta)))

    def elapsed(self) -> float:
        return 0.0 if self.clock_start is None else time.perf_counter() - self.clock_start

    def fit(self) -> Progress:
        """Train until the goal; always ends with an evaluation of the final model."""
        self.clock_start = time.perf_counter()
        return run_epochs(
            self.progress, self.goal.max_epochs, self.train_one_epoch, self.evaluate_and_track
        )

    def over_budget(self) -> bool:
        return self.goal.time_budget is not None and self.elapsed() >= self.goal.time_budget

    def step(self, epoch: int, i: int) -> np.ndarray:
        """One synchronous step; the combined vector's tail (each rank's seconds, then
        blocks.LOSS ...)."""
        total = self.job.ask({"kind": "step", "epoch": epoch, "step": i}, self.theta)
        grad = total[: self.theta.size].astype(np.float32)
        self.lr = self.schedule(self.progress.step)
        # torch.optim.SGD with weight decay, momentum 0: theta -= lr (grad + lambda theta)
        grad += np.float32(self.l2) * self.theta
        self.theta = self.theta - np.float32(self.lr) * grad
        return total[self.theta.size :]

    def train_one_epoch(self, epoch: int) -> bool:
        p = self.progress
        sums, steps, start, wall = np.zeros(3), 0, time.perf_counter(), 0.0
        ranks = np.zeros(self.world)
        for i in range(self.steps_per_epoch):
            t0 = time.perf_counter()
            tail = self.step(epoch, i)
            took = time.perf_counter() - t0
            p.step += 1
            p.images += int(tail[blocks.COUNT])
            p.train_seconds += took
            wall += took
            steps += 1
            sums += tail[[blocks.LOSS, blocks.CORRECT, blocks.COUNT]]
            ranks += tail[: self.world]
            stop = self.over_budget()
            last = i == self.steps_per_epoch - 1 or stop
            if p.step % self.log_every == 0 or last or time.perf_counter() - start >= LOG_SECONDS:
                p.epochs_done = epoch + (i + 1) / self.steps_per_epoch
                self.report(sums, steps, wall, start, ranks)
                sums, steps, start, wall = np.zeros(3), 0, time.perf_counter(), 0.0
                ranks = np.zeros(self.world)
            if stop:
                p.stop_reason = "time budget spent"
                return i == self.steps_per_epoch - 1
        return True

    def report(self, sums: np.ndarray, steps: int, wall: float, start: float,
               ranks: np.ndarray) -> None:  # fmt: skip
        """Post an interval's training metrics under the reference's names: compute the
        slowest rank's, comm the rest of the step (module docstring)."""
        p = self.progress
        per_step = wall / max(steps, 1)
        rank_compute = np.minimum(ranks / max(steps, 1), per_step)
        compute = float(rank_compute.max()) if rank_compute.size else 0.0
        comm = per_step - compute
        p.time_compute += compute * steps
        p.time_comm += comm * steps
        p.time_comm_total += comm * steps
        p.comm_bytes += self.step_bytes * steps
        loss_sum, right, rows = (float(v) for v in sums)
        rate = rows / max(time.perf_counter() - start, 1e-9)
        meta = {
            "epoch": round(p.epochs_done, 4),
            "step": p.step,
            "elapsed": round(self.elapsed(), 3),
        }
        per_rank = [
            (0.0, float(mine), per_step - float(mine), per_step - float(mine))
            for mine in rank_compute
        ]
        post_report(
            self.reporter, meta, loss=loss_sum / max(rows, 1), accuracy=right / max(rows, 1),
            lr=self.lr, epochs=p.epochs_done, throughput=("samples_per_sec", rate),
            timings=(0.0, compute, comm, comm), comm_bytes=self.step_bytes,
            per_rank=per_rank if self.world > 1 else (),
        )  # fmt: skip
        self.say(
            f"step {p.step:6d}  epoch {p.epochs_done:7.3f}  loss {loss_sum / max(rows, 1):.4f}  "
            f"acc {right / max(rows, 1):.4f}  lr {self.lr:.4f}  {rate:8.1f} samples/s  "
            f"comm {100 * comm / max(per_step, 1e-12):4.1f}%  elapsed {self.elapsed():8.1f}s"
        )

    def evaluate(self) -> tuple[float, float, Shard]:
        """Validation loss and accuracy of theta over the whole test set, and the
        predictions in the test set's order (one command through the job)."""
        parts = self.job.ask({"kind": "eval"}, self.theta)
        loss = sum(p[3] for p in parts)
        right = sum(p[4] for p in parts)
        count = sum(p[5] for p in parts)
        shard = Shard(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            {LABEL: np.concatenate([p[2] for p in parts])},
        )
        return loss / max(count, 1), right / max(count, 1), shard

    def evaluate_and_track(self) -> None:
        val_loss, val_acc, shard = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter, 0,
            self.say,
        )  # fmt: skip
        self.schedule.observe(val_loss)
        if self.predictions is not None:
            self.predictions.submit(shard, self.progress.history[-1])

    def throughput(self) -> float:
        p = self.progress
        return p.images / p.train_seconds if p.train_seconds > 0 else math.nan
