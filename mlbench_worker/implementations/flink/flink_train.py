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
import socket
from collections.abc import Callable
from typing import Any

import numpy as np

from mlbench_worker.implementations.engine_training import EngineTrainer
from mlbench_worker.tasks.epsilon.schedule import PlateauSchedule
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
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


class FlinkTrainer(EngineTrainer):
    """Rank 0's Flink application: `fit()` runs the benchmark (module docstring)."""

    def __init__(
        self, job: TrainingJob, goal: Goal, reporter: Reporter, *, features: int, world: int,
        shard_rows: int, batch_size: int, schedule: PlateauSchedule, l2: float, log_every: int,
        say: Callable[[str], None],
    ) -> None:  # fmt: skip
        super().__init__(
            goal, reporter, features=features, world=world, log_every=log_every, say=say
        )
        self.job = job
        self.batch_size = batch_size
        self.schedule = schedule
        self.l2 = l2
        self.steps_per_epoch = -(-shard_rows // batch_size)
        # Per rank and step: the model in (float32) and its gradient vector out (float64).
        self.step_bytes = (4 + 8) * self.theta.size if world > 1 else 0

    def warm(self) -> float:
        """Every subtask's blocks loaded (made where missing) and its Python worker up,
        before the clock; the slowest subtask's seconds."""
        return float(max(self.job.ask({"kind": "warm"}, self.theta)))

    def step_total(self, epoch: int, i: int) -> np.ndarray:
        """The batch gradients of step `i`, combined by the job."""
        return self.job.ask({"kind": "step", "epoch": epoch, "step": i}, self.theta)

    def evaluate_parts(self) -> list:
        """blocks.scores of theta on every subtask's block (one command through the job)."""
        return self.job.ask({"kind": "eval"}, self.theta)

    def after_evaluation(self, val_loss: float) -> None:
        self.schedule.observe(val_loss)
