"""Series from the command line: `mlbench run NAME --seeds 1,2,3 --workers 1,2,4` (or the
original CLI's `mlbench run NAME 1 2 4`) queues one run per seed and worker count on the
master, and `mlbench series` lists, shows and cancels them.

Why a module of its own: `cmd_run` stays the one way to start runs; it asks `targets`
whether the command line means one run or a series, and hands a series over to
`start_series`. The statistics shown are the master's (GET /api/series/<id>/): nothing
is computed here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mlbench_worker.client.cli.formatting import WIDE, Column, View, fit, plural
from mlbench_worker.client.cli.master import (
    EXIT_CONFLICT,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Master,
)
from mlbench_worker.client.cli.results import series_table


def number_list(text: str) -> list[int]:
    """argparse type of --seeds and --workers: "1,2,4" (or a single number)."""
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers, e.g. 1,2,4"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one number, e.g. 1,2,4")
    return values


def targets(args: argparse.Namespace) -> tuple[list[int] | None, int | None, list[int] | None]:
    """The seeds, the repeats and the worker counts the command line asks for (None: not
    given); CliError naming the option when they contradict each other."""
    counts = list(args.worker_counts or []) + list(args.counts or [])
    if args.worker_counts and args.counts:
        raise CliError(
            "give the worker counts once: as --workers 1,2,4 or as NAME 1 2 4", EXIT_USAGE
        )
    if args.seeds is not None and args.repeats is not None:
        raise CliError(
            "give --seeds or --repeats, not both (--repeats N means seeds 1..N)", EXIT_USAGE
        )
    if args.repeats is not None and args.repeats < 1:
        raise CliError("--repeats must be at least 1", EXIT_USAGE)
    if any(c < 1 for c in counts):
        raise CliError("--workers must be at least 1", EXIT_USAGE)
    for option, values in (("--seeds", args.seeds), ("--workers", counts)):
        if values and len(set(values)) != len(values):
            raise CliError(f"{option}: give each value once", EXIT_USAGE)
    return args.seeds, args.repeats, counts or None


def is_series(seeds: list[int] | None, repeats: int | None, counts: list[int] | None) -> bool:
    """More than one run asked for: a series (one run stays a plain run)."""
    return len(seeds or [0]) > 1 or (repeats or 1) > 1 or len(counts or [0]) > 1


def start_series(
    args: argparse.Namespace, master: Master, fields: dict[str, Any], counts: list[int] | None
) -> int:
    """POST /api/series/ and say what was queued; with --wait, follow each run in turn."""
    body = master.json(
        "create_series",
        args.name,
        seeds=args.seeds,
        repeats=args.repeats,
        workers=counts,
        **{k: v for k, v in fields.items() if v is not None},
    )
    view = View.of(args)
    print(
        f"series {body['id']} {body['name']!r}: {plural(len(body['runs']), 'run')}, one after "
        "another"
    )
    print(runs_table(body["runs"], view))
    if args.wait:
        from mlbench_worker.client.cli.waiting import wait_for

        for run in body["runs"]:
            wait_for(master, run["id"])
    print(
        f"follow it with `mlbench series {body['id']}`; its statistics: "
        f"`mlbench report --series {body['id']}`; cancel it: `mlbench series {body['id']} "
        "--cancel`"
    )
    return EXIT_OK


def queue_text(run: dict[str, Any]) -> str:
    """A run's state, with its place while it waits in the master's queue."""
    place = run.get("queue_position")
    return f"{run.get('state')} #{place}" if place else str(run.get("state"))


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


# A series' runs (`mlbench series ID`, `mlbench run` of a series): the reason shortened to
# fit the terminal, whole with --wide.
RUN_COLUMNS = [
    Column("RUN", lambda r: r["id"]),
    Column("SEED", lambda r: r.get("seed")),
    Column("WORKERS", lambda r: r.get("num_workers")),
    Column("STATE", queue_text),
    Column("REASON", lambda r: _one_line(r.get("reason")), most=60, least=12),
]


def runs_table(members: list[dict[str, Any]], view: View = WIDE) -> str:
    return fit(RUN_COLUMNS, members, view)


# The list of series (`mlbench series`).
SERIES_COLUMNS = [
    Column("ID", lambda s: s["id"]),
    Column("NAME", lambda s: _one_line(s["name"]), most=40, least=12),
    Column("STATE", lambda s: s["state"]),
    Column("SEEDS", lambda s: ",".join(map(str, s["seeds"])), most=20, least=8, drop=2),
    Column("WORKERS", lambda s: ",".join(map(str, s["worker_counts"])), most=20, least=8),
    Column("RUNS", lambda s: len(s["runs"])),
    Column(
        "CREATED",
        lambda s: (s.get("created_at") or "")[:19].replace("T", " "),
        brief=lambda s: (s.get("created_at") or "")[:16].replace("T", " "),
        drop=1,
    ),
]


def cmd_series(args: argparse.Namespace, master: Master) -> int:
    """`mlbench series`: every series; `mlbench series ID`: its runs and statistics;
    `--cancel`: drop its queued runs and cancel its active one."""
    view = View.of(args)
    if args.series is None:
        if args.cancel:
            raise CliError("--cancel needs the series: mlbench series ID --cancel", EXIT_USAGE)
        listed = master.json("list_series")
        if args.json:
            print(json.dumps(listed, indent=2, sort_keys=True))
            return EXIT_OK
        if not listed:
            print("no series yet: start one with `mlbench run NAME --seeds 1,2,3 --workers 1,2`")
            return EXIT_OK
        print(fit(SERIES_COLUMNS, listed, view))
        return EXIT_OK
    if args.cancel:
        try:
            body = master.json("cancel_series", args.series)
        except CliError as exc:
            if exc.code != EXIT_CONFLICT:
                raise
            raise CliError(
                f"series {args.series} has no queued or active run left to cancel: its runs "
                "have ended and their results stay. To remove it with its runs: "
                f"`mlbench delete --series {args.series}`",
                EXIT_CONFLICT,
            ) from None
        if args.json:
            print(json.dumps(body, indent=2, sort_keys=True))
            return EXIT_OK
        print(f"series {args.series} cancelled: nothing of it is queued or active now")
        print(runs_table(body["runs"], view))
        return EXIT_OK
    body = master.json("get_series", args.series)
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
        return EXIT_OK
    print(view.say(f"series {body['id']} {body['name']!r} ({body['state']})"))
    print(runs_table(body["runs"], view))
    if (body.get("statistics") or {}).get("groups"):
        print()
        print(series_table(body, view))  # the table of `mlbench report --series ID`
    took = [r for r in body["runs"] if r.get("started_at")]
    print(f"\n{len(took)} of {plural(len(body['runs']), 'run')} started; dashboard: "
          f"{master.url}/series/{body['id']}/")  # fmt: skip
    return EXIT_OK


def delete_series(series_id: int, master: Master) -> int:
    """`mlbench delete --series ID`: the series and its runs (metrics, logs, results) go;
    its active run, if any, is stopped first (DELETE /api/series/<id>/)."""
    body = master.json("get_series", series_id)
    active = [r["id"] for r in body["runs"] if r.get("state") in ("INITIALIZED", "STARTED")]
    master.call("delete_series", series_id)
    n = len(body["runs"])
    stopped = f"; its active run {active[0]} was stopped first" if active else ""
    print(f"series {series_id} {body['name']!r} deleted with its {plural(n, 'run')}{stopped}")
    return EXIT_OK
