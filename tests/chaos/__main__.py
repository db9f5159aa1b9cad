"""`make chaos`: the long form of the chaos series (python -m tests.chaos --help).

Prints the seed first (replay a series with `--seed`), the violations and the fault log
when an invariant failed, and the summary in numbers, which is also written as JSON.
Exits 1 when an invariant was violated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

from tests.chaos.faults import KINDS
from tests.chaos.series import Settings, run_series
from tests.chaos.summary import table

SEED_VARIABLE = "CHAOS_SEED"


def seed_from(text: str | None) -> int:
    """The series' seed: given, else CHAOS_SEED, else a new one."""
    value = text or os.environ.get(SEED_VARIABLE, "")
    if not value:
        return random.SystemRandom().randrange(1, 10**6)
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"the seed must be a whole number, got {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", help=f"the series' seed (default: ${SEED_VARIABLE}, else new)")
    parser.add_argument("--runs", type=int, default=40, help="runs queued (default 40)")
    parser.add_argument("--faults", type=int, default=0, help="faults (default: 1.5 per run)")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated fault kinds (default: all)"
    )
    parser.add_argument("--driver", choices=("local", "slurm"), default="local")
    parser.add_argument(
        "--out", type=Path, default=Path("chaos-results"), help="where the summary JSON goes"
    )
    args = parser.parse_args(argv)
    args.out = args.out.absolute()  # the runs' files (their --metrics-file) are read from it
    seed = seed_from(args.seed)
    print(f"chaos series: seed {seed} (replay: make chaos CHAOS_SEED={seed})", flush=True)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    settings = Settings(
        seed=seed, runs=args.runs, faults=args.faults or (args.runs * 3) // 2, kinds=kinds,
        driver=args.driver, deadline=max(3600.0, args.runs * 120.0),
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-", dir=args.out))
    outcome = run_series(settings, workdir)
    print(outcome.report() if not outcome.held else outcome.runs(), flush=True)
    print(table(outcome.summary), flush=True)
    path = args.out / f"chaos-{args.driver}-{seed}.json"
    path.write_text(json.dumps(outcome.summary, indent=2) + "\n")
    print(f"summary written to {path}; fault log {outcome.fault_log}", flush=True)
    return 0 if outcome.held else 1


if __name__ == "__main__":
    sys.exit(main())
