"""The worker's command line: `python -m mlbench_worker <task> [options]`.

Parsing and checking happen before torch or MPI is imported, so a typo costs a fraction of a
second and every rank stops with the same clear message (printed once, by rank 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from mlbench_worker import catalogue, checkpoint
from mlbench_worker.home import mlbench_home
from mlbench_worker.tasks import TASKS

BACKENDS = ("mpi", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")


def launch_rank() -> int:
    """This process's rank as mpirun announced it (0 when run alone), without importing MPI."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


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
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mlbench_worker",
        description="Run one mlbench benchmark task (start it with mpirun -n K for K workers).",
    )
    p.add_argument("task", help=f"benchmark task: {', '.join(TASKS)}")
    g = p.add_argument_group("what is measured")
    g.add_argument(
        "--model",
        help="model (default: the task's): "
        + "; ".join(f"{name}: {', '.join(t.models)}" for name, t in _one_per_kind().items()),
    )
    g.add_argument(
        "--target",
        default="standard",
        help="the task's goal (catalogue), e.g. for task 1a: light (70%%), standard (80%%), "
        "paper (91%%); for resnet50-imagenet: light (50%%), standard (75.9%%)",
    )
    g.add_argument(
        "--dataset",
        default="auto",
        help="auto (the task's real data set if it can be had, else synthetic), the real "
        "one (cifar10 for task 1a, imagenet for task 1b, epsilon for task 2), or synthetic",
    )
    g.add_argument(
        "--time-budget",
        type=_positive_float,
        metavar="SECONDS",
        help="stop training after this many seconds on the benchmark clock",
    )
    g.add_argument(
        "--max-epochs",
        type=_positive_int,
        metavar="N",
        help="stop after N epochs (default: the task's: 164 for task 1a, 90 for task 1b, "
        "20 for task 2)",
    )
    g.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help="images (task 2: samples) per worker per step (default: the task's: 128, "
        "256 for task 1b)",
    )
    g.add_argument(
        "--lr",
        type=_positive_float,
        help="peak learning rate (default: the task's rate x workers x batch / the task's "
        "batch; task 2 scales with at most 16 workers)",
    )
    g.add_argument(
        "--l2",
        type=_nonnegative_float,
        metavar="LAMBDA",
        help="task 2: L2 penalty lambda/2 |theta|^2 (default: the task's, 2.5e-6 = 1/400,000)",
    )
    g.add_argument(
        "--seed", type=_nonnegative_int, default=42, help="seed shared by all ranks (default 42)"
    )
    g.add_argument(
        "--train-images",
        "--train-samples",
        dest="train_images",
        type=_positive_int,
        metavar="N",
        help="use only the first N training images or samples (smoke tests; recorded); for "
        "synthetic data, how many to generate",
    )
    g.add_argument(
        "--lr-schedule",
        help="task 1b: after the warm-up, step (divide by 10 at epochs 30, 60, 80; the "
        "default) or cosine (to zero at the last epoch)",
    )
    g.add_argument(
        "--label-smoothing",
        type=_fraction,
        metavar="EPS",
        help="task 1b: cross-entropy label smoothing (default 0; MLPerf allows 0.1)",
    )
    g.add_argument(
        "--zero-init-residual",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="task 1b: start each residual block's last batch-norm scale at zero (Goyal et "
        "al.; the default)",
    )
    g.add_argument(
        "--crop",
        type=_positive_int,
        metavar="PIXELS",
        help="task 1b smoke tests: train and evaluate on PIXELS x PIXELS crops instead of "
        "224 (at least 64; recorded in the summary as a smoke-test crop)",
    )
    g.add_argument(
        "--test-images",
        "--test-samples",
        dest="test_images",
        type=_positive_int,
        metavar="N",
        help="the same for the test set",
    )
    g = p.add_argument_group("how it runs")
    g.add_argument(
        "--backend", default="mpi", help="gradient all-reduce: mpi (mpi4py), gloo, nccl (CUDA)"
    )
    g.add_argument("--device", default="auto", help="auto, cpu or cuda")
    g.add_argument(
        "--threads",
        type=_positive_int,
        metavar="N",
        help="torch threads per rank (default: OMP_NUM_THREADS or torch's)",
    )
    g.add_argument(
        "--amp", action="store_true", help="mixed precision (float16 on CUDA, bfloat16 on CPU)"
    )
    g.add_argument(
        "--amp-dtype",
        help="task 1b with --amp: bfloat16 (no loss scaling) or float16 (with a gradient "
        "scaler; CUDA only); default float16 on CUDA, bfloat16 on CPU",
    )
    g.add_argument("--channels-last", action="store_true", help="channels_last memory format")
    g.add_argument(
        "--no-overlap",
        action="store_true",
        help="sum gradients with one all-reduce after backward instead of in buckets "
        "overlapped with it",
    )
    g.add_argument(
        "--bucket-mb",
        type=_positive_float,
        metavar="MB",
        help="size of the gradient buckets overlapped with backward (default: at most 4 MB, "
        "and small enough for 8 buckets)",
    )
    g.add_argument(
        "--data-workers",
        type=_nonnegative_int,
        metavar="N",
        help="task 1b: image-decoding processes per rank (default: the rank's cores on CUDA, "
        "half of them on CPU; 0 decodes in the training process)",
    )
    g.add_argument(
        "--data-dir",
        default=None,
        help="where data sets are cached (default: MLBENCH_DATA_DIR or $MLBENCH_HOME/datasets)",
    )
    g.add_argument("--checkpoint-dir", help="write a checkpoint there after every epoch (rank 0)")
    g.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in --checkpoint-dir"
    )
    g.add_argument(
        "--resume-from",
        metavar="DIR",
        help="continue from another run's checkpoint in DIR: rank 0 copies it into "
        "--checkpoint-dir first, so this run's checkpoints never overwrite it (implies --resume)",
    )
    g = add_reporting_options(p)
    g.add_argument(
        "--log-every",
        type=_positive_int,
        default=50,
        metavar="STEPS",
        help="post training metrics every STEPS steps (default 50), and at least every 15 s",
    )
    return p


_KIND_NAMES = {"image": "task 1a", "imagenet": "task 1b", "linear": "task 2"}
# Options only task 1b reads, and the task fields that give their defaults.
_IMAGENET_ONLY = {
    "--lr-schedule": "lr_schedule",
    "--label-smoothing": "label_smoothing",
    "--zero-init-residual": "zero_init_residual",
    "--crop": None,
    "--amp-dtype": None,
    "--data-workers": None,
}
AMP_DTYPES = ("bfloat16", "float16")
MIN_CROP = 64  # below it ResNet's last stage sees 1x1 maps and batch norm breaks on 1 image


def _one_per_kind() -> dict:
    """One task of each kind, to list the models each kind accepts."""
    return {
        _KIND_NAMES.get(kind, kind): t for kind, t in {t.kind: t for t in TASKS.values()}.items()
    }


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parsed and checked options; exits with status 2 and a message naming the problem."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.task not in TASKS:
        parser.error(f"unknown task {args.task!r}; choose one of: {', '.join(TASKS)}")
    task = TASKS[args.task]
    args.model = args.model or task.model
    _choice(parser, "--model", args.model, task.models)
    _choice(parser, "--backend", args.backend, BACKENDS)
    _choice(parser, "--device", args.device, DEVICES)
    info = catalogue.get(args.task)  # goals and data sets are the catalogue's
    _choice(parser, "--dataset", args.dataset, info.datasets)
    _choice(parser, "--target", args.target, tuple(info.goals))
    if args.backend == "nccl" and args.device == "cpu":
        parser.error("--backend nccl needs --device cuda (use mpi or gloo on CPU)")
    if task.kind == "linear":
        for flag, given in (("--amp", args.amp), ("--channels-last", args.channels_last)):
            if given:
                parser.error(f"{flag} applies to image tasks only, not to {args.task}")
    elif args.l2 is not None:
        parser.error(f"--l2 applies to task 2 (linear models) only, not to {args.task}")
    _check_imagenet_options(parser, args, task)
    args.batch_size = args.batch_size or task.batch_size
    args.max_epochs = args.max_epochs or task.max_epochs
    if args.threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        args.threads = int(os.environ["OMP_NUM_THREADS"]) or None
    args.data_dir = args.data_dir or default_data_dir()
    # Task 1b's synthetic set is files written into the data directory, not arrays in memory.
    if args.dataset != "synthetic" or task.kind == "imagenet":
        problem = _writable_dir(args.data_dir)
        if problem:
            parser.error(
                f"data directory {args.data_dir} cannot be written ({problem}): pass "
                "--data-dir or set MLBENCH_DATA_DIR to a writable folder"
            )
    if args.resume_from and not args.checkpoint_dir:
        parser.error("--resume-from needs --checkpoint-dir (where this run writes its own)")
    args.resume = args.resume or bool(args.resume_from)
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir (the folder holding checkpoint.pt)")
    if args.checkpoint_dir:
        problem = _writable_dir(args.checkpoint_dir)
        if problem:
            parser.error(f"--checkpoint-dir {args.checkpoint_dir} cannot be written ({problem})")
    if args.resume_from and launch_rank() == 0:
        # Only rank 0 reads the checkpoint (and broadcasts it), so only it needs the copy.
        problem = checkpoint.adopt(args.resume_from, args.checkpoint_dir)
        if problem:
            parser.error(problem)
    check_reporting_options(parser, args)
    return args


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


def _check_imagenet_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, task: object
) -> None:
    """Refuse task-1b options elsewhere; for task 1b, check them and fill the task's defaults."""
    given = {opt: getattr(args, opt[2:].replace("-", "_")) for opt in _IMAGENET_ONLY}
    if task.kind != "imagenet":
        for opt, value in given.items():
            if value is not None:
                parser.error(f"{opt} applies to task 1b (ImageNet) only, not to {args.task}")
        return
    from mlbench_worker.tasks.resnet_imagenet import LR_SCHEDULES

    for opt, field in _IMAGENET_ONLY.items():
        if field and given[opt] is None:
            setattr(args, field, getattr(task, field))
    _choice(parser, "--lr-schedule", args.lr_schedule, LR_SCHEDULES)
    if args.amp_dtype is not None:
        _choice(parser, "--amp-dtype", args.amp_dtype, AMP_DTYPES)
        if not args.amp:
            parser.error("--amp-dtype needs --amp")
        if args.amp_dtype == "float16" and args.device == "cpu":
            parser.error(
                "--amp-dtype float16 needs --device cuda (its gradient scaler is CUDA's); "
                "use bfloat16 on CPU"
            )
    if args.crop is not None and args.crop < MIN_CROP:
        parser.error(f"--crop must be at least {MIN_CROP} pixels, got {args.crop}")
