"""The Spark application's training loops (rank 0 is the Spark driver): the reference's
mini-batch SGD on Spark's primitives, and MLlib's L-BFGS; the same clock, evaluation, goal
tracking, metric names and stopping as every implementation (training/progress.py).

SGD, step for step as the reference (tasks/epsilon/train.py, training/trainer.py): the model
theta = (w, b) goes to the executors as a broadcast; each partition (the reference rank of
the same number) computes the mean gradient of its next batch of the task's size in the
reference's order (blocks.batch_gradient); `treeAggregate` sums them (the all-reduce); the
driver applies torch's SGD update with weight decay, theta -= lr (g + lambda theta), at the
rate of the reference's plateau schedule (tasks/epsilon/schedule.py). Each epoch is the
shard's steps, then an evaluation.

L-BFGS: one "epoch" is one `LogisticRegression.fit` of `iterations` L-BFGS iterations
(regParam lambda, no elastic net, no standardisation, so the penalty is the task's on the
raw weights; MLlib leaves the intercept unpenalised), started from the previous fit's model
(the curvature memory starts anew at each fit: the price of evaluating between them).

The benchmark clock starts at the first step, after the cluster, the application and the
cached data are up (those are reported apart as start-up). A step's time is split as the
reference splits it, with what Spark lets us see: compute is the slowest rank's arithmetic
(SGD: each partition times its own work, block read and gradient, and returns the seconds in
its slot of the aggregate; L-BFGS: MLlib's tasks are timed by Spark's listener only, so its
compute is the executors' run time of the fit's stages, from the application's status
store, `StageTimes`, shared evenly among the ranks); communication is the rest of the step's
wall time on the driver (scheduling, shipping the broadcast and the tasks, the tree
aggregate, results back); data is 0 (the rows are on the executors before the clock starts).
The summary adds the listener's stage totals over the whole training (`StageTimes.totals`).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from typing import Any

import numpy as np

from mlbench_worker.implementations.engine_ranks import DIRECT
from mlbench_worker.implementations.engine_training import EngineTrainer
from mlbench_worker.implementations.spark import blocks
from mlbench_worker.tasks.epsilon.schedule import PlateauSchedule
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.progress import (
    Progress,
)
from mlbench_worker.training.recipe import Goal


class StageTimes:
    """Sums of Spark's per-stage task metrics (its status store, the application's REST API
    at /api/v1, fed by its listener), for the stages completed since the last reading."""

    FIELDS = ("executorRunTime", "executorDeserializeTime", "resultSerializationTime",
              "executorCpuTime", "jvmGcTime")  # fmt: skip

    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self.url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
        self.seen: set[int] = set()
        self.totals = dict.fromkeys(self.FIELDS, 0.0)
        self.tasks = 0

    def read(self) -> dict[str, float]:
        """Seconds of each field (all tasks together) since the last call. The listener
        records a stage's end a moment after its job returns: its queue is drained first
        (Spark's LiveListenerBus.waitUntilEmpty, reached through the JVM gateway), so a
        reading holds every stage of the jobs that have returned."""
        with contextlib.suppress(Exception):  # an older Spark without it: readings may lag
            self.sc._jsc.sc().listenerBus().waitUntilEmpty()
        try:
            with DIRECT.open(self.url, timeout=5) as reply:
                stages = json.load(reply)
        except (OSError, ValueError):
            return dict.fromkeys(self.FIELDS, 0.0)
        new = dict.fromkeys(self.FIELDS, 0.0)
        for stage in stages:
            key = stage.get("stageId", -1) * 1000 + stage.get("attemptId", 0)
            if key in self.seen:
                continue
            self.seen.add(key)
            self.tasks += int(stage.get("numCompleteTasks", 0))
            for field in self.FIELDS:
                # CPU time is in nanoseconds, the others in milliseconds.
                scale = 1e-9 if field == "executorCpuTime" else 1e-3
                new[field] += float(stage.get(field, 0)) * scale
        for field in self.FIELDS:
            self.totals[field] += new[field]
        return new


class SparkTrainer(EngineTrainer):
    """Rank 0's Spark application: `fit()` runs the benchmark with `train_one_epoch` of the
    run's trainer (SGD or L-BFGS); both evaluate with the same executor code."""

    def __init__(
        self, spark: Any, test_blocks: Any, goal: Goal, reporter: Reporter, **kwargs: Any
    ) -> None:
        super().__init__(goal, reporter, **kwargs)
        self.spark = spark
        self.sc = spark.sparkContext
        self.test_blocks = test_blocks
        self.stage_times = StageTimes(self.sc)
        self.test_total = 0

    def fit(self) -> Progress:
        self.stage_times.read()  # start-up's stages are not training's
        return super().fit()

    def evaluate_parts(self) -> list:
        """blocks.scores of theta on every partition (one Spark job)."""
        theta = self.sc.broadcast(self.theta)
        parts = self.test_blocks.mapPartitions(
            lambda items: blocks.scores(items, theta.value)
        ).collect()
        theta.unpersist()
        return parts


class SgdTrainer(SparkTrainer):
    """Mini-batch SGD on a broadcast model and a tree aggregate (module docstring)."""

    def __init__(
        self, *args: Any, train_blocks: Any, shard_rows: int, batch_size: int, seed: int,
        schedule: PlateauSchedule, l2: float, depth: int = 2, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.train_blocks = train_blocks
        self.batch_size = batch_size
        self.seed = seed
        self.schedule = schedule
        self.l2 = l2
        self.depth = depth
        self.steps_per_epoch = -(-shard_rows // batch_size)
        # Per rank and step: the model in (a float32 broadcast) and its aggregate out (float64).
        self.step_bytes = (4 + 8) * self.theta.size if self.world > 1 else 0

    def step_total(self, epoch: int, i: int) -> np.ndarray:
        """The batch gradients of step `i`, tree-aggregated."""
        seed, batch, world = self.seed, self.batch_size, self.world
        theta = self.sc.broadcast(self.theta)
        total = self.train_blocks.mapPartitions(
            lambda items: blocks.batch_gradient(items, theta.value, seed, epoch, i, batch, world)
        ).treeAggregate(
            np.zeros(self.theta.size + world + 4), blocks.add, blocks.add, depth=self.depth
        )
        theta.unpersist()
        return total

    def after_evaluation(self, val_loss: float) -> None:
        self.schedule.observe(val_loss)


class LbfgsTrainer(SparkTrainer):
    """MLlib's LogisticRegression (L-BFGS), `iterations` per epoch (module docstring)."""

    def __init__(
        self, *args: Any, train_frame: Any, train_rows: int, iterations: int, l2: float,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.train_frame = train_frame
        self.train_rows = train_rows
        self.iterations = iterations
        self.l2 = l2
        self.model: Any = None
        # Per rank and iteration: the coefficients out, the gradient and loss back (float64).
        self.step_bytes = 2 * 8 * self.theta.size if self.world > 1 else 0

    def train_one_epoch(self, epoch: int) -> bool:
        from pyspark.ml.classification import LogisticRegression

        p = self.progress
        self.stage_times.read()  # the evaluation's stages are not the fit's
        start = time.perf_counter()
        estimator = LogisticRegression(
            maxIter=self.iterations, regParam=self.l2, elasticNetParam=0.0,
            standardization=False, fitIntercept=True, tol=0.0, family="binomial",
            aggregationDepth=2,
        )  # fmt: skip
        if self.model is not None:
            # MLlib's warm start (Spark-internal API, public in the JVM): the last model.
            estimator._java_obj.setInitialModel(self.model._java_obj)
        self.model = estimator.fit(self.train_frame)
        wall = time.perf_counter() - start
        iterations = max(int(self.model.summary.totalIterations), 1)
        history = list(self.model.summary.objectiveHistory)
        self.theta = np.append(
            np.asarray(self.model.coefficients.toArray(), np.float32),
            np.float32(self.model.intercept),
        )
        p.step += iterations
        p.images += iterations * self.train_rows
        p.train_seconds += wall
        p.epochs_done = epoch + 1
        objective = history[-1] if history else math.nan
        # MLlib's tasks are timed by Spark's listener only: the executors' run time of the
        # fit's stages, shared evenly among the ranks.
        busy = self.stage_times.read()["executorRunTime"] / self.world
        # The training accuracy costs MLlib a pass over the data: off the clock, and its
        # stages are not training's.
        paused = time.perf_counter()
        accuracy = self.model.summary.accuracy
        self.stage_times.read()
        if self.clock_start is not None:
            self.clock_start += time.perf_counter() - paused
        self.lr = 0.0
        self.report(
            np.array([objective * self.train_rows, accuracy * self.train_rows, self.train_rows]),
            iterations, wall, start, np.full(self.world, busy),
            samples=iterations * self.train_rows,
        )  # fmt: skip
        if self.over_budget():
            p.stop_reason = "time budget spent"
        return True
