"""`--implementation spark`: task 2 on a Spark standalone cluster the run's ranks bring up.

The framework dimension asks what an engine costs, so everything but the engine is the
reference's: the same rows (LIBSVM text read by Spark's reader, data.py), the same shards and
their order per epoch (tasks/epsilon/shards.py), the same zero start, penalty, batch, rates and
plateau schedule (tasks/epsilon/schedule.py), the same goal tracking, metric names, reporter
and predictions (training/progress.py, metric_sink.py, prediction_sink.py), the summary's
keys. Two trainers, as Spark users write them (train.py): the reference's mini-batch SGD on a
broadcast model and a tree aggregate (algorithm `allreduce`), and MLlib's LogisticRegression
with L-BFGS (algorithm `lbfgs`, Spark's only).

Spark is not a cluster driver: it runs inside the ranks every driver already starts
(cluster.py), so limits, network shaping, cancellation and every driver apply to it.

This process never imports torch, and pyspark only once the options are checked and Java is
found, so a refused option costs no JVM. It ends as every rank does (training/entry.py).
"""

from __future__ import annotations

from mlbench_worker.implementations.engine_rules import refuse_engine_options
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.errors import WorkerError

INSTALL_HINT = (
    "pyspark is not installed in this worker's Python: pip install 'mlbench[spark]' (Spark "
    "also needs Java 17 or later: Debian's default-jre-headless)"
)


def run_main(config: RunConfig) -> int:
    """Entry point after option parsing (mlbench_worker/__main__.py); the exit code."""

    def body(world: World) -> int:
        refuse_unsupported(config)
        try:
            import pyspark  # noqa: F401
        except ImportError:
            raise WorkerError(INSTALL_HINT) from None
        from mlbench_worker.implementations import engine_ranks
        from mlbench_worker.implementations.spark.session import run

        missing = engine_ranks.java_missing("Spark")
        if missing:
            raise WorkerError(missing)
        control = engine_ranks.Control()
        world.known(control.rank, control.size, control.abort)
        return run(config, control)

    return run_rank(body)


def refuse_unsupported(config: RunConfig) -> None:
    """The options this implementation cannot honour, each named with why."""
    refuse_engine_options(
        config,
        "spark",
        models=" (MLlib's LogisticRegression and its SGD twin)",
        combine="Spark's tree aggregate",
        combines="aggregates",
    )
