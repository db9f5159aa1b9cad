"""`--implementation flink`: task 2 on a Flink standalone cluster the run's ranks bring up.

Built as the spark implementation is, so that between them and the reference only the
engine differs: the same rows, shards and their order per epoch (tasks/epsilon/shards.py,
each subtask's block made as a Spark partition's is: implementations/spark/blocks.py), the
same zero start, penalty, batch, rates and plateau schedule (tasks/epsilon/schedule.py),
goal tracking, metric names, reporter, predictions and record (training/rank_body.py).
The SGD itself is written on PyFlink's DataStream API (flink_job.py says how and why a
streaming job and not a job per step); the cluster runs inside the ranks every driver
starts (flink_cluster.py), so limits, network shaping, cancellation and every driver apply.

PyFlink 2.x cannot share the workers' Python environment (constraints-flink.txt says why),
so its ranks run a Python of their own: the implementation catalogue's `python_setting`
(MLBENCH_FLINK_PYTHON) names it to the master, which starts the ranks with it.

This process never imports torch, and pyflink only once the options are checked and Java is
found, so a refused option, a missing Java or a missing pyflink costs no JVM.
"""

from __future__ import annotations

import importlib.util

from mlbench_worker.implementations.engine_rules import refuse_engine_options
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.errors import WorkerError

INSTALL_HINT = (
    "pyflink is not installed in this worker's Python: Flink needs a Python environment of "
    "its own (pip install -c constraints-flink.txt 'mlbench[flink]'; `make test-deps` makes "
    ".venv-flink), named to the master by MLBENCH_FLINK_PYTHON; it also needs Java 17 or "
    "later (Debian's default-jre-headless)"
)


def run_main(config: RunConfig) -> int:
    """Entry point after option parsing (mlbench_worker/__main__.py); the exit code."""

    def body(world: World) -> int:
        refuse_unsupported(config)
        if importlib.util.find_spec("pyflink") is None:
            raise WorkerError(INSTALL_HINT)
        from mlbench_worker.implementations import engine_ranks
        from mlbench_worker.implementations.flink.flink_session import run

        missing = engine_ranks.java_missing("Flink")
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
        "flink",
        models="",
        combine="Flink's keyed combine",
        combines="combines",
    )
