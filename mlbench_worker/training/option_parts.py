"""What every worker command line shares: the training command (options.py) and the
backend benchmark (backend_benchmark/options.py).

Parsing and checking happen before torch or MPI is imported, so a typo costs a fraction of a
second and every rank stops with the same clear message (printed once, by rank 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from mlbench_worker.shared.home import mlbench_home

BACKENDS = ("mpi", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
ERROR_GRACE = 1.0  # seconds a rank other than 0 waits before exiting on a bad option


def launch_rank() -> int:
    """This process's rank as mpirun announced it (0 when run alone), without importing MPI."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def launch_size() -> int | None:
    """The number of ranks mpirun started (None when not under mpirun), without MPI."""
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def default_data_dir() -> str:
    if os.environ.get("MLBENCH_DATA_DIR"):
        return os.environ["MLBENCH_DATA_DIR"]
    return str(mlbench_home() / "datasets")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text!r}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that prints its error once (rank 0) under mpirun, and exits 2 on every rank."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if launch_rank() == 0:
            self.print_usage(sys.stderr)
            print(f"{self.prog}: error: {message}", file=sys.stderr, flush=True)
        else:
            # mpirun ends the job when the first rank exits: the others wait a moment, so
            # rank 0's message is out before its process is killed.
            time.sleep(ERROR_GRACE)
        sys.exit(2)


def _choice(
    parser: argparse.ArgumentParser, option: str, value: str, choices: tuple | dict
) -> None:
    if value not in choices:
        parser.error(f"{option}: unknown value {value!r}; choose one of: {', '.join(choices)}")


def _writable_dir(path: str) -> str | None:
    """None if `path` is (or can be made) a writable folder, else the reason it is not."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        return f"{exc.strerror or exc}"
    return None


def add_reporting_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Where a worker reports (every worker command has them); the group, to add more."""
    g = parser.add_argument_group("reporting")
    g.add_argument(
        "--master-url",
        default=os.environ.get("MLBENCH_MASTER_URL") or None,
        help="post metrics to this master (default: MLBENCH_MASTER_URL)",
    )
    g.add_argument(
        "--run-id",
        default=os.environ.get("MLBENCH_RUN_ID") or None,
        help="the run's id at the master (default: MLBENCH_RUN_ID)",
    )
    g.add_argument(
        "--metrics-file", help="write metric points and the summary as JSON lines to this file"
    )
    return g


def check_reporting_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The reporting options make sense together; `args.token` from MLBENCH_RUN_TOKEN."""
    if args.master_url and not args.run_id:
        parser.error(
            "--master-url needs --run-id (or MLBENCH_RUN_ID) to know which run to report to"
        )
    if args.master_url and not args.master_url.startswith(("http://", "https://")):
        parser.error(f"--master-url must start with http:// or https://, got {args.master_url!r}")
    args.token = os.environ.get("MLBENCH_RUN_TOKEN") or None
    if args.metrics_file:
        folder = os.path.dirname(os.path.abspath(args.metrics_file))
        problem = _writable_dir(folder)
        if problem:
            parser.error(
                f"--metrics-file {args.metrics_file}: folder cannot be written ({problem})"
            )
