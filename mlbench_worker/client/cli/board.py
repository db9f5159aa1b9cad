"""`mlbench board`: the master's results board, printed, or written as a static site with
`--html DIR` (static_board.py), or as the API's JSON with `--json`. The board is the API's
(`GET /api/results/`): ranked and separated there (by test set and by the origin's trust
too), so the terminal, the static site and the dashboard agree."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli import static_board
from mlbench_worker.client.cli.master import EXIT_OK, EXIT_USAGE, CliError, Master

FILTERS = ("division", "measured", "data", "evaluation", "origin", "hardware",
           "algorithm", "implementation", "network", "backend")  # fmt: skip


def add_parser(sub: Any) -> None:
    board = sub.add_parser(
        "board", help="the results board: every task's results, ranked apart by section"
    )
    board.add_argument("--html", metavar="DIR", help="write it as static HTML and JSON in DIR")
    board.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    board.add_argument("--task", help="only this task")
    for name in FILTERS:
        board.add_argument(f"--{name}", help=f"only entries with this {name}")
    board.add_argument("--workers", type=int, help="only entries with this many workers")
    board.add_argument("--seed", type=int, help="only entries with this seed")


def cmd_board(args: argparse.Namespace, master: Master) -> int:
    filters = {n: getattr(args, n) for n in ("task", *FILTERS, "workers", "seed")}
    board = master.json("get_results", **filters)
    if args.html:
        return _write(Path(args.html), board, master.url)
    if args.json:
        print(json.dumps(board, indent=2, sort_keys=True))
        return EXIT_OK
    for section in board["sections"]:
        print(section["label"])
        for entry in section["entries"]:
            place = f"{entry['rank']:>3}" if entry["rank"] is not None else "  -"
            print(
                f"  {place}  {static_board.score_text(entry):<32} {entry['workers']:>3} workers  "
                f"seeds {','.join(str(s) for s in entry['seeds'])}  {static_board.origin_text(entry)}  "
                f"{entry.get('graded_on') or ''}"
                + (f"  ({entry['unranked']})" if entry["unranked"] else "")
            )
    if not board["sections"]:
        print("no results match")
    return EXIT_OK


def _write(folder: Path, board: dict[str, Any], master_url: str) -> int:
    """Each file written beside its final name and renamed, so a published folder never
    holds half a page."""
    if folder.exists() and not folder.is_dir():
        raise CliError(f"--html {folder}: not a folder", EXIT_USAGE)
    folder.mkdir(parents=True, exist_ok=True)
    files = static_board.pages(board, master_url)
    for name, text in files.items():
        partial = folder / f".{name}.part"
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, folder / name)
    entries = sum(len(s["entries"]) for s in board["sections"])
    print(
        f"wrote {len(files)} files to {folder}: {entries} entries; open {folder / static_board.INDEX}"
    )
    return EXIT_OK
