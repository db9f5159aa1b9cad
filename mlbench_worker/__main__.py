"""`python -m mlbench_worker <task> [options]`: parse options, then train (see run.py)."""

from __future__ import annotations

import sys

from mlbench_worker.options import parse_args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Imported only now: parsing must stay fast and torch-free.
    from mlbench_worker.run import run_main

    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
