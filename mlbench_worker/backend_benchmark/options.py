"""The command line of `python -m mlbench_worker backend-benchmark [options]`.

The master builds one command for every reference task (mlbench_master/cluster/mpirun.py:
`--backend --threads --device --target --dataset`, and `--time-budget`), so this parser
accepts all of them and gives each the meaning it can have for a measurement:

- `--backend` is the list of backends to measure ("mpi,gloo"; `--backends` is the same);
  the master stores that list as the run's backend;
- `--target standard` and `--dataset auto` are what the master sends for a run that names
  neither: accepted and ignored. Any other goal or data set is refused, as are the training
  options (`--max-epochs`, checkpoints, resume): a measurement has no accuracy goal, reads no
  data and keeps no checkpoints;
- `--time-budget` bounds the whole sweep: it stops cleanly and reports what it measured.

Like the training parser it imports neither torch nor MPI, prints its error once (rank 0)
and exits 2 on every rank.
"""

from __future__ import annotations

import argparse
import os

from mlbench_worker.backend_benchmark import TASK
from mlbench_worker.backend_benchmark.sizes import parse_size, size_list
from mlbench_worker.backend_benchmark.stats import OPS
from mlbench_worker.training.option_parts import (
    BACKENDS,
    DEVICES,
    _choice,
    _nonnegative_int,
    _Parser,
    _positive_float,
    _positive_int,
    add_reporting_options,
    check_reporting_options,
)

# What the master sends for a run that names no goal and no data set (cluster/mpirun.py).
MASTER_DEFAULT_TARGET = "standard"
MASTER_DEFAULT_DATASET = "auto"
# Defaults that keep the whole sweep (17 sizes x 2 ops x 2 backends) to a few seconds on a
# machine's shared memory and about three minutes on a 100 Mbit/s link: each (op, backend,
# size) stops repeating after SIZE_TIME_CAP seconds once MIN_REPEATS repeats are timed.
WARMUP, REPEATS, MIN_REPEATS, SIZE_TIME_CAP = 5, 30, 3, 3.0
MIN_SIZE, MAX_SIZE = "1KiB", "64MiB"


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _names(text: str) -> list[str]:
    return list(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"python -m mlbench_worker {TASK}",
        description="Measure all-reduce and broadcast latency and bandwidth between the ranks "
        "(start it with mpirun -n K, K >= 2).",
    )
    g = p.add_argument_group("what is measured")
    g.add_argument(
        "--backend",
        "--backends",
        dest="backends",
        metavar="LIST",
        help="comma-separated backends to measure: mpi (mpi4py), gloo, nccl (CUDA only); "
        "default: mpi,gloo on CPU, mpi,gloo,nccl with --device cuda",
    )
    g.add_argument(
        "--ops",
        default=",".join(OPS),
        metavar="LIST",
        help=f"collectives (default {','.join(OPS)})",
    )
    g.add_argument(
        "--min-size", type=_size, default=MIN_SIZE, help=f"smallest message (default {MIN_SIZE})"
    )
    g.add_argument(
        "--max-size", type=_size, default=MAX_SIZE, help=f"largest message (default {MAX_SIZE})"
    )
    g.add_argument(
        "--size-factor",
        type=int,
        choices=(2, 4),
        default=2,
        help="each size is the previous one times this (default 2)",
    )
    g.add_argument(
        "--warmup",
        type=_nonnegative_int,
        default=WARMUP,
        metavar="N",
        help=f"untimed runs of each op, backend and size first (default {WARMUP}; at least one "
        "always runs: the first call pays for setting connections up)",
    )
    g.add_argument(
        "--repeats",
        type=_positive_int,
        default=REPEATS,
        metavar="N",
        help=f"timed repeats of each op, backend and size (default {REPEATS})",
    )
    g.add_argument(
        "--min-repeats",
        type=_positive_int,
        default=MIN_REPEATS,
        metavar="N",
        help=f"repeats timed even past --size-time-cap (default {MIN_REPEATS})",
    )
    g.add_argument(
        "--size-time-cap",
        type=_positive_float,
        default=SIZE_TIME_CAP,
        metavar="SECONDS",
        help="stop repeating an op, backend and size after this long once --min-repeats are "
        f"timed (default {SIZE_TIME_CAP:g}; a capped row says so)",
    )
    g.add_argument(
        "--time-budget",
        type=_positive_float,
        metavar="SECONDS",
        help="stop the whole sweep after this long; what was measured is kept and reported",
    )
    g = p.add_argument_group("how it runs")
    g.add_argument("--device", default="auto", help="auto, cpu or cuda (cuda adds nccl)")
    g.add_argument("--threads", type=_positive_int, metavar="N", help="torch threads per rank")
    add_reporting_options(p)
    # What the master passes to every reference task; see the module docstring.
    hidden = argparse.SUPPRESS
    p.add_argument("--target", default=MASTER_DEFAULT_TARGET, help=hidden)
    p.add_argument("--dataset", default=MASTER_DEFAULT_DATASET, help=hidden)
    for flag in ("--max-epochs", "--checkpoint-dir", "--resume-from"):
        p.add_argument(flag, help=hidden)
    p.add_argument("--resume", action="store_true", help=hidden)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parsed and checked options; exits with status 2 and a message naming the problem."""
    parser = build_parser()
    args = parser.parse_args(argv)
    measurement = f"{TASK} measures communication"
    if args.target != MASTER_DEFAULT_TARGET:
        parser.error(f"--target {args.target}: {measurement}; it has no accuracy goal")
    if args.dataset != MASTER_DEFAULT_DATASET:
        parser.error(f"--dataset {args.dataset}: {measurement}; it reads no data set")
    for flag, given in (
        ("--max-epochs", args.max_epochs),
        ("--checkpoint-dir", args.checkpoint_dir),
        ("--resume", args.resume),
        ("--resume-from", args.resume_from),
    ):
        if given:
            parser.error(f"{flag}: {measurement}; it has no epochs and keeps no checkpoints")
    _choice(parser, "--device", args.device, DEVICES)
    if args.backends is not None:
        args.backends = _names(args.backends)
        unknown = [b for b in args.backends if b not in BACKENDS]
        if unknown or not args.backends:
            parser.error(
                f"--backend: {', '.join(unknown) or 'nothing'} is not a backend; give one or "
                f"more of {', '.join(BACKENDS)}, separated by commas"
            )
        if "nccl" in args.backends and args.device == "cpu":
            parser.error("--backend nccl needs --device cuda (mpi and gloo measure on CPU)")
    args.ops = _names(args.ops)
    unknown = [o for o in args.ops if o not in OPS]
    if unknown or not args.ops:
        parser.error(
            f"--ops: {', '.join(unknown) or 'nothing'} is not an op; give one or more of "
            f"{', '.join(OPS)}, separated by commas"
        )
    try:
        args.sizes = size_list(args.min_size, args.max_size, args.size_factor)
    except ValueError as exc:
        parser.error(f"--min-size/--max-size: {exc}")
    if args.min_repeats > args.repeats:
        parser.error(f"--min-repeats ({args.min_repeats}) is more than --repeats ({args.repeats})")
    if args.threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        args.threads = int(os.environ["OMP_NUM_THREADS"]) or None
    check_reporting_options(parser, args)
    return args
