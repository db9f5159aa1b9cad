"""`mlbench board`: the master's results board, printed, or written as a static site with
`--html DIR` (static_board.py), or as the API's JSON with `--json`. The board is the API's
(`GET /api/results/`): ranked and separated there (by test set and by the origin's trust
too), so the terminal, the static site and the dashboard agree.

The terminal and `--json` read one page of entries (`--limit`, `--offset`), as the
dashboard does: a public installation's whole board is tens of MB that nobody reads in a
terminal. `--all` reads it whole; `--html` always does (a published copy is the whole
board)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli import static_board
from mlbench_worker.client.cli.costs import NOT_PRICED, money
from mlbench_worker.client.cli.formatting import Column, View, fit, plural, view_options
from mlbench_worker.client.cli.master import EXIT_OK, EXIT_USAGE, CliError, Master

DEFAULT_LIMIT = 100  # entries a page read shows, as the dashboard's board page
MAX_LIMIT = 1000  # the most the API answers in one page
FILTERS = ("division", "measured", "data", "evaluation", "origin", "hardware",
           "algorithm", "implementation", "network", "backend")  # fmt: skip


def add_parser(sub: Any) -> None:
    board = sub.add_parser(
        "board", help="the results board: every task's results, ranked apart by section"
    )
    board.add_argument("--html", metavar="DIR", help="write it as static HTML and JSON in DIR")
    view_options(board)
    board.add_argument("--task", help="only this task")
    for name in FILTERS:
        board.add_argument(f"--{name}", help=f"only entries with this {name}")
    board.add_argument("--workers", type=int, help="only entries with this many workers")
    board.add_argument("--seed", type=int, help="only entries with this seed")
    board.add_argument(
        "--limit",
        type=int,
        help=f"entries read at most (1 to {MAX_LIMIT}; {DEFAULT_LIMIT} unless --all)",
    )
    board.add_argument("--offset", type=int, help="the first entry read (0: the first)")
    board.add_argument("--all", action="store_true", help="read every entry, not one page")


def _stats(entry: dict[str, Any]) -> str:
    stats = entry["statistics"]
    valid = "valid" if stats["valid"] else f"not valid: {stats['invalid_reason']}"
    return f"{plural(stats['runs'], 'run')}, {stats['reached']} reached; {valid}"


def _cost(entry: dict[str, Any]) -> str:
    cost = entry["cost"]
    median = (cost.get("cost_to_target") or {}).get("median")
    if median is not None and cost.get("currency"):
        return f"{money(median, cost['currency'])} to target"
    return cost.get("reason") or NOT_PRICED


# An entry of the board (a series' worker count, or a run), by section: its place and score
# first; what it ran on with --wide. The section's title says what the section holds.
ENTRY_COLUMNS = [
    Column("RANK", lambda e: "-" if e["rank"] is None else e["rank"]),
    Column(
        "SCORE",
        static_board.score_text,
        brief=lambda e: static_board.score_text(e).removesuffix(" (median)"),
        brief_header="SCORE (MEDIAN)",
    ),
    Column("WORKERS", lambda e: e["workers"]),
    Column("SEEDS", lambda e: ",".join(str(s) for s in e["seeds"]), most=12, least=5, drop=2),
    Column("HARDWARE", lambda e: e["hardware"], wide=True),
    Column("ALGORITHM", lambda e: e["algorithm"], wide=True),
    Column("IMPLEMENTATION", lambda e: e["implementation"], wide=True),
    Column("NETWORK", lambda e: e["network"], wide=True),
    Column("BACKEND", lambda e: e["backend"], wide=True),
    Column("RUNS", _stats, wide=True),
    Column("COST", _cost, wide=True),
    Column("ORIGIN", static_board.origin_text, least=16, drop=1),
    Column("GRADED ON", lambda e: e.get("graded_on") or "", wide=True),
    Column("NOT RANKED", lambda e: e["unranked"] or "", most=40, least=12),
]


def _page(args: argparse.Namespace) -> dict[str, int]:
    """The page to read (`limit`, `offset`), or {} for the whole board; a usage error names
    the option and its fix before anything is read."""
    paging = args.limit is not None or args.offset is not None
    if paging and (args.all or args.html):
        why = "--all reads every entry" if args.all else "--html writes the whole board"
        raise CliError(f"--limit and --offset read one page; {why}: leave them out", EXIT_USAGE)
    if args.all or args.html:
        return {}
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    if not 1 <= limit <= MAX_LIMIT:
        raise CliError(f"--limit {limit}: a whole number from 1 to {MAX_LIMIT}", EXIT_USAGE)
    offset = args.offset or 0
    if offset < 0:
        raise CliError(f"--offset {offset}: 0 or more (0: the first entry)", EXIT_USAGE)
    return {"limit": limit, "offset": offset}


def _more(board: dict[str, Any]) -> str | None:
    """What a page leaves out, and the option that reads the next page; None when none."""
    if board.get("next_offset") is None:
        return None
    shown = sum(len(s["entries"]) for s in board["sections"])
    first = board["offset"] + 1
    return (
        f"entries {first:,} to {first + shown - 1:,} of {board['count']:,}; the next page: "
        f"--offset {board['next_offset']} (or --all for every entry)"
    )


def cmd_board(args: argparse.Namespace, master: Master) -> int:
    filters = {n: getattr(args, n) for n in ("task", *FILTERS, "workers", "seed")}
    board = master.json("get_results", **filters, **_page(args))
    if args.html:
        return _write(Path(args.html), board, master.url)
    if args.json:
        print(json.dumps(board, indent=2, sort_keys=True))
        return EXIT_OK
    view = View.of(args)
    for i, section in enumerate(board["sections"]):
        if i:
            print()
        print(view.say(section["label"]))
        print(fit(ENTRY_COLUMNS, section["entries"], view))
    if not board["sections"]:
        print("no results match" if not board.get("offset") else "no entries past --offset")
    more = _more(board)
    if more:
        print()
        print(view.say(more))
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
        f"wrote {plural(len(files), 'file')} to {folder}: {plural(entries, 'entry', 'entries')}; "
        f"open {folder / static_board.INDEX}"
    )
    return EXIT_OK
