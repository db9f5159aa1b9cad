"""`mlbench run --algorithm-file FILE` and `mlbench download RUN --algorithm`: a researcher's
own algorithm sent to the master, and the one a run trained with fetched back.

The file is read here first with the same declaration reader the master uses
(mlbench_worker/shared/algorithm_source.py, `ast` only, never run), so a broken
declaration is named with its fix before anything is sent; the master reads it again (it
decides) and stores it by SHA-256, which the run then names as its `algorithm_source`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli.master import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError, Master
from mlbench_worker.shared import algorithm_source


def uploaded(args: argparse.Namespace, master: Master) -> dict[str, Any] | None:
    """The master's answer for `--algorithm-file` (None without one): {sha256, name, ...}."""
    path = getattr(args, "algorithm_file", None)
    if not path:
        return None
    try:
        source = Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"--algorithm-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    try:
        declared = algorithm_source.read(source)
    except algorithm_source.DeclarationError as exc:
        raise CliError(
            f"--algorithm-file {path}: {exc} (the contract: NAME, API and OPTIONS as literals, "
            "one class deriving from Algorithm with finish; see docs/algorithms.rst)",
            EXIT_USAGE,
        ) from None
    if args.algorithm not in (None, declared.name):
        raise CliError(
            f"--algorithm {args.algorithm} is not the NAME {path} declares ({declared.name}); "
            "leave --algorithm out",
            EXIT_USAGE,
        )
    try:
        return master.json("upload_algorithm", path)
    except CliError as exc:
        if "staff" in str(exc):
            raise CliError(
                f"{exc}; uploading an algorithm needs a staff user's token (MLBENCH_TOKEN)",
                exc.code,
            ) from None
        raise


def download_algorithm(args: argparse.Namespace, master: Master) -> int:
    """`mlbench download RUN --algorithm`: the source of the run's uploaded algorithm."""
    if args.run is None:
        raise CliError("--algorithm: give the RUN whose algorithm to download", EXIT_USAGE)
    run = master.json("get_run", args.run)
    sha = run.get("algorithm_source") or ""
    if not sha:
        what = run.get("algorithm") or "no algorithm"
        raise CliError(
            f"run {args.run} trained with {what}, not an uploaded algorithm: there is no "
            "source to download",
            EXIT_NOT_FOUND,
        )
    response = master.call("get_algorithm", sha)
    body = response.content
    if algorithm_source.sha256(body) != sha:
        raise CliError(f"the master sent a file whose SHA-256 is not {sha}", EXIT_NOT_FOUND)
    path = args.output or f"{run.get('algorithm') or 'algorithm'}-{sha[:12]}.py"
    Path(path).write_bytes(body)
    print(f"wrote {path} ({len(body)} bytes, {run.get('algorithm')}, sha256 {sha})")
    return EXIT_OK
