# Over 400 lines: every option of the training command, its help and its checks, read as one list.
"""The worker's command line: `python -m mlbench_worker <task> [options]`.

Parsed and checked (into config.RunConfig) before torch or MPI is imported, so a typo costs
a fraction of a second and every rank stops with the same message, printed once by rank 0.
"""

from __future__ import annotations

import argparse
import os

from mlbench_worker.shared import algorithm_catalogue, catalogue, implementation_catalogue
from mlbench_worker.shared.imagenet_rules import MAX_CROP, MIN_CROP  # the audit's bounds too
from mlbench_worker.tasks import TASKS, LinearTask, Task
from mlbench_worker.tasks.imagenet.task import LR_SCHEDULES
from mlbench_worker.training import checkpoint
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.option_parts import (
    BACKENDS,
    DEVICES,
    _choice,
    _fraction,
    _nonnegative_float,
    _nonnegative_int,
    _Parser,
    _positive_float,
    _positive_int,
    _writable_dir,
    add_reporting_options,
    check_reporting_options,
    default_data_dir,
    launch_rank,
    launch_size,
)


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
        + "; ".join(f"{name}: {', '.join(models)}" for name, models in _models_by_family().items()),
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
        "--seed",
        type=_nonnegative_int,
        default=catalogue.DEFAULT_SEED,
        help=f"seed shared by all ranks (default {catalogue.DEFAULT_SEED})",
    )
    g.add_argument(
        "--train-images",
        "--train-samples",
        "--train-tokens",
        dest="train_images",
        type=_positive_int,
        metavar="N",
        help="use only the first N training images, samples or tokens (smoke tests; "
        "recorded); for synthetic data, how many to generate",
    )
    g.add_argument(
        "--vocab-size",
        type=_positive_int,
        metavar="WORDS",
        help="task 3, synthetic data only: the stand-in's vocabulary (default WikiText-2's "
        "33,278; smaller for smoke tests)",
    )
    g.add_argument(
        "--lr-schedule",
        help="task 1b: after the warm-up, step (divide by 10 at epochs 30, 60, 80; the "
        "default), cosine (to zero at the last epoch) or poly (MLPerf's closed ResNet "
        "schedule: warm-up from 0, then polynomial decay of power 2 to 1e-4 at the last "
        "epoch)",
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
        f"224 ({MIN_CROP} to {MAX_CROP}; recorded in the summary as a smoke-test crop)",
    )
    g.add_argument(
        "--test-images",
        "--test-samples",
        "--test-tokens",
        dest="test_images",
        type=_positive_int,
        metavar="N",
        help="the same for the test set",
    )
    g = p.add_argument_group("algorithm")
    g.add_argument(
        "--algorithm",
        metavar="NAME",
        help="how ranks combine their work (default: the task's first, allreduce): "
        + "; ".join(
            f"{a.name}: {a.title}"
            + (f" (options {', '.join(o.name for o in a.options)})" if a.options else "")
            for a in algorithm_catalogue.ALGORITHMS.values()
        ),
    )
    g.add_argument(
        "--algorithm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the algorithm, repeatable: " + algorithm_catalogue.options_help(),
    )
    g.add_argument(
        "--algorithm-source",
        metavar="SHA256",
        help="an algorithm uploaded to the master (--algorithm is then its NAME): each rank "
        "fetches the file by this hash, checks it and imports it (docs/algorithms.rst); "
        "--algorithm package.module names an installed one instead",
    )
    g.add_argument(
        "--algorithm-stall-seconds",
        type=_positive_float,
        metavar="SECONDS",
        help="end the run when one call of the algorithm lasts longer than max(SECONDS, 20 x "
        "the slowest step so far) (default 120 for an outside algorithm; off for built-ins)",
    )
    g.add_argument(
        "--implementation",
        default=implementation_catalogue.DEFAULT_IMPLEMENTATION,
        metavar="NAME",
        help="which code trains: "
        + "; ".join(
            f"{i.name}: {i.title}" for i in implementation_catalogue.IMPLEMENTATIONS.values()
        ),
    )
    g = p.add_argument_group("how it runs")
    g.add_argument(
        "--backend",
        help="gradient all-reduce: mpi (mpi4py), gloo, nccl (CUDA); default mpi, and for "
        "torch-ddp gloo (nccl with --device cuda)",
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


# Options that only one family of tasks reads (a task lists those it reads in its
# `task_options`), and whom they apply to, for the message that refuses them elsewhere.
TASK_OPTIONS = {
    "--amp": "image tasks",
    "--channels-last": "image tasks",
    "--l2": "task 2 (linear models)",
    "--lr-schedule": "task 1b (ImageNet)",
    "--label-smoothing": "task 1b (ImageNet)",
    "--zero-init-residual": "task 1b (ImageNet)",
    "--crop": "task 1b (ImageNet)",
    "--amp-dtype": "task 1b (ImageNet)",
    "--data-workers": "task 1b (ImageNet)",
    "--vocab-size": "task 3 (language models)",
}
# Task options whose default is the task's field of the same name.
_DEFAULTS_FROM_TASK = ("--lr-schedule", "--label-smoothing", "--zero-init-residual")
AMP_DTYPES = ("bfloat16", "float16")


def _models_by_family() -> dict[str, tuple[str, ...]]:
    """The models each family of tasks accepts, by family ("task 1a": its catalogue category)."""
    return {
        f"task {catalogue.get(name).category.split()[0]}": task.models
        for name, task in TASKS.items()
    }


def parse_args(argv: list[str] | None = None) -> RunConfig:
    """The run's configuration, parsed and checked; exits with status 2 naming the problem."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.task not in TASKS:
        parser.error(f"unknown task {args.task!r}; choose one of: {', '.join(TASKS)}")
    task = TASKS[args.task]
    args.model = args.model or task.model
    _choice(parser, "--model", args.model, task.models)
    args.backend = args.backend or _default_backend(args)
    _choice(parser, "--backend", args.backend, BACKENDS)
    _choice(parser, "--device", args.device, DEVICES)
    info = catalogue.get(args.task)  # goals and data sets are the catalogue's
    _choice(parser, "--dataset", args.dataset, info.datasets)
    _choice(parser, "--target", args.target, tuple(info.goals))
    if args.backend == "nccl" and args.device == "cpu":
        parser.error("--backend nccl needs --device cuda (use mpi or gloo on CPU)")
    _check_task_options(parser, args, task)
    _check_algorithm(parser, args)
    _check_implementation(parser, args)
    args.batch_size = args.batch_size or task.batch_size
    args.max_epochs = args.max_epochs or task.max_epochs
    if args.threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        args.threads = int(os.environ["OMP_NUM_THREADS"]) or None
    args.data_dir = args.data_dir or default_data_dir()
    # A synthetic set made of files is written into the data directory too.
    if args.dataset != "synthetic" or task.synthetic_on_disk:
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
    writes = implementation_catalogue.IMPLEMENTATIONS[args.implementation].checkpoints
    if args.resume_from and launch_rank() == 0 and writes:  # else refused where it runs
        # Only rank 0 reads the checkpoint (and broadcasts it), so only it needs the copy.
        problem = checkpoint.adopt(args.resume_from, args.checkpoint_dir)
        if problem:
            parser.error(problem)
    check_reporting_options(parser, args)
    return RunConfig.from_namespace(args)


def _check_task_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, task: Task | LinearTask
) -> None:
    """Refuse the options of other task families; fill this task's defaults and check them."""
    for opt, whom in TASK_OPTIONS.items():
        dest = opt[2:].replace("-", "_")
        given = getattr(args, dest) != parser.get_default(dest)
        if given and opt not in task.task_options:
            parser.error(f"{opt} applies to {whom} only, not to {args.task}")
        if opt in _DEFAULTS_FROM_TASK and opt in task.task_options and not given:
            setattr(args, dest, getattr(task, dest))
    if args.lr_schedule is not None:
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
    if args.crop is not None and not MIN_CROP <= args.crop <= MAX_CROP:
        parser.error(
            f"--crop must be at least {MIN_CROP} and at most {MAX_CROP} pixels, got {args.crop}"
        )
    if args.vocab_size is not None and args.dataset != "synthetic":
        parser.error("--vocab-size sizes the synthetic stand-in: it needs --dataset synthetic")


def _default_backend(args: argparse.Namespace) -> str:
    """mpi, or the first backend an implementation that runs on certain ones can use here."""
    info = implementation_catalogue.get(args.implementation)
    if info is None or not info.backends:
        return "mpi"
    if args.device == "cuda" and "nccl" in info.backends:
        return "nccl"
    return next(b for b in info.backends if b != "nccl")


def _check_implementation(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--implementation: one the task has, running an algorithm and backend it can run."""
    admitted = catalogue.get(args.task).implementations
    name = args.implementation
    if name not in admitted:
        parser.error(
            f"--implementation: {args.task} has no implementation {name!r}; choose one of: "
            f"{', '.join(admitted) or 'none'}"
        )
    info = implementation_catalogue.IMPLEMENTATIONS[name]
    if not info.admits(args.algorithm):
        parser.error(f"--implementation {name}: {info.algorithm_refusal(args.algorithm)}")
    if info.backends and args.backend not in info.backends:
        parser.error(
            f"--implementation {name} runs on --backend {' or '.join(info.backends)}, "
            f"not {args.backend}"
        )


def _check_algorithm(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--algorithm and its options, by algorithm_catalogue.check (the master's rules too),
    against the worker count when mpirun announced it (setup checks again with MPI's)."""
    admitted = catalogue.get(args.task).algorithms
    name = args.algorithm or (admitted[0] if admitted else algorithm_catalogue.DEFAULT_ALGORITHM)
    options = _algorithm_options(parser, args.algorithm_option)
    if args.algorithm_source is not None or "." in name or "/" in name:  # registry.is_outside
        # An outside algorithm: its declaration is read where it is loaded (build.py), the
        # file fetched first when it was uploaded; it runs in the reference loop only.
        if args.algorithm_source is not None and not args.algorithm:
            parser.error("--algorithm-source needs --algorithm NAME (the file's NAME)")
        if args.implementation != implementation_catalogue.DEFAULT_IMPLEMENTATION:
            parser.error(f"--algorithm {name}: an outside algorithm runs in the reference "
                         f"implementation only, not {args.implementation}")  # fmt: skip
        args.algorithm, args.algorithm_options = name, options
        return
    if name not in admitted:
        why = catalogue.get(args.task).why_not(name)
        parser.error(
            f"--algorithm: {args.task} does not admit {name!r}{f' ({why})' if why else ''}; "
            f"choose one of: {', '.join(admitted)}"
        )
    values, problems = algorithm_catalogue.check(name, options, launch_size())
    if problems:
        parser.error(f"--algorithm {name}: " + "; ".join(problems))
    if name != "allreduce" and args.bucket_mb is not None:
        parser.error(
            f"--bucket-mb sets the all-reduce's buckets: it does not apply to --algorithm {name}"
        )
    args.algorithm, args.algorithm_options = name, values


def _algorithm_options(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    """--algorithm-option KEY=VALUE, each once, as text (the algorithm's rules type them)."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            parser.error(f"--algorithm-option must be KEY=VALUE, got {item!r}")
        if key in options:
            parser.error(f"--algorithm-option {key} is given twice")
        options[key] = value.strip()
    return options
