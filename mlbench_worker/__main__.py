"""`python -m mlbench_worker <task> [options]`: parse options, then train (training/run.py) or, for
the backend benchmark, measure (see backend_benchmark/): a measurement has options of its own,
so it is dispatched before the training option parser sees them."""

from __future__ import annotations

import sys

from mlbench_worker.backend_benchmark import TASK as BACKEND_BENCHMARK
from mlbench_worker.training.options import parse_args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [BACKEND_BENCHMARK]:
        from mlbench_worker.backend_benchmark.options import parse_args as parse_benchmark_args

        args = parse_benchmark_args(argv[1:])
        # Imported only now: parsing must stay fast and torch-free.
        from mlbench_worker.backend_benchmark.main import run_main as run_benchmark

        return run_benchmark(args)
    config = parse_args(argv)
    if config.implementation == "tensorflow":
        # A framework of its own: this process never imports torch.
        from mlbench_worker.implementations.tensorflow import run_main as run_tensorflow

        return run_tensorflow(config)
    if config.implementation == "spark":
        # A framework of its own: this process never imports torch.
        from mlbench_worker.implementations.spark import run_main as run_spark

        return run_spark(config)
    if config.implementation == "flink":
        # A framework of its own, in a Python of its own: this process never imports torch.
        from mlbench_worker.implementations.flink import run_main as run_flink

        return run_flink(config)
    # Imported only now: parsing must stay fast and torch-free.
    from mlbench_worker.training.run import run_main

    return run_main(config)


if __name__ == "__main__":
    sys.exit(main())
