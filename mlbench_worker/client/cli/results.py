"""`mlbench report --series`, `mlbench report ... --plot` and the MLPerf log downloads.

The numbers are the master's (`GET /api/series/<id>/`'s `statistics`, computed by
mlbench_master/results/statistics.py): this module only lays them out, so the table, the
dashboard and the API never disagree. Charts are drawn by mlbench_worker/shared/plots.py, the
module the master draws its own with; only `--plot` needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli.comparison import report_json, report_table
from mlbench_worker.client.cli.costs import series_cost, series_cost_note
from mlbench_worker.client.cli.formatting import WIDE, Column, View, fit, plural
from mlbench_worker.client.cli.master import EXIT_OK, EXIT_USAGE, CliError, Master

CHARTS = ("accuracy", "speedup", "time-split", "cost")
RUN_CHARTS = ("accuracy", "time-split")


def _number(value: Any, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    return "-" if value is None else f"{scale * float(value):.{digits}f}{unit}"


def stat_text(stat: dict | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """ "median (mean ± sd, cv)" of a STAT; "-" when it has no values."""
    if not stat or not stat.get("n"):
        return "-"
    text = _number(stat["median"], digits, scale, unit)
    if stat.get("sd") is not None:
        spread = f"{_number(stat['mean'], digits, scale)} ± {_number(stat['sd'], digits, scale)}"
        text += f" ({spread}, cv {_number(stat['cv'], 2)})"
    return text


def _median(stat: dict | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """The median of a STAT alone (the default view); "-" when it has no values."""
    if not stat or not stat.get("n"):
        return "-"
    return _number(stat["median"], digits, scale, unit)


def series_columns(stats: dict) -> list[Column]:
    """The columns of a series' statistics, one row per worker count (a group): the
    medians by default, with their spread (mean ± sd, cv) and the rest with --wide."""
    target = stats.get("target") or {}
    currency = (stats.get("cost") or {}).get("currency")
    # A goal of another metric than accuracy (task 3's perplexity) is shown as a number.
    accuracy = target.get("metric", "val_accuracy") == "val_accuracy"
    after = (1, 100, "%") if accuracy else (1, 1.0, "")

    def stat(key: str, *form: Any, brief: bool = False) -> Callable[[dict], str]:
        return lambda g: (_median if brief else stat_text)(g.get(key), *form)

    def olympic(g: dict) -> str:
        return _number(g["time_to_target"].get("olympic_mean"), unit=" s")

    def span(g: dict) -> str:
        ttt = g["time_to_target"]
        return f"{_number(ttt.get('min'))}–{_number(ttt.get('max'))}" if ttt.get("n") else "-"

    def reached(g: dict) -> str:
        return f"{g['reached']}/{g['runs']}" + (f" (+{g['pending']})" if g.get("pending") else "")

    return [
        Column("WORKERS", lambda g: g["num_workers"]),
        Column("REACHED", reached),
        Column(
            "TIME TO TARGET median (mean ± sd, cv)",
            stat("time_to_target", 1, 1.0, " s"),
            brief=stat("time_to_target", 1, 1.0, " s", brief=True),
            brief_header="TIME TO TARGET",
        ),
        Column("OLYMPIC", olympic, wide=True),
        Column("MIN–MAX", span, wide=True),
        Column(
            "ACC AFTER TIME",
            stat("accuracy_after_time", *after),
            brief=stat("accuracy_after_time", *after, brief=True),
            drop=2,
        ),
        Column(
            (target.get("throughput_unit") or "throughput").upper(),
            stat("images_per_second", 0),
            brief=stat("images_per_second", 0, brief=True),
            drop=1,
        ),
        Column("COMM", stat("communication_share", 1, 100, "%"), wide=True),
        Column(
            "SPEED-UP",
            stat("speedup", 2, 1.0, "x"),
            brief=stat("speedup", 2, 1.0, "x", brief=True),
        ),
        Column(
            "EFFICIENCY",
            stat("efficiency", 2),
            brief=stat("efficiency", 2, brief=True),
            drop=4,
        ),
        Column(
            "COST TO TARGET median",
            lambda g: series_cost(g, currency)[0],
            brief_header="COST TO TARGET",
            drop=3,
        ),
        Column("PRICE INDEX", lambda g: series_cost(g, currency)[1], drop=5),
        Column("VALID", lambda g: "yes" if g["valid"] else "NO"),
    ]


def series_table(series: dict, view: View = WIDE) -> str:
    """The statistics of a series, one row per worker count, and the rule it is held to."""
    stats = series.get("statistics") or {}
    target = stats.get("target") or {}
    groups = stats.get("groups", [])
    notes = [
        f"{plural(g['num_workers'], 'worker')}: not valid: {g['invalid_reason']}"
        for g in groups
        if not g["valid"]
    ]
    accuracy = target.get("metric", "val_accuracy") == "val_accuracy"
    value = target.get("value")
    head = (
        f"series {series.get('id')} {series.get('name', '')!r}: {target.get('task')}, goal "
        f"{target.get('goal')}"
        + (
            (
                f" ({100 * value:.1f}% {target.get('metric')})"
                if accuracy
                else f" ({target.get('metric')} {value:g}, lower is better)"
            )
            if value
            else ""
        )
    )
    if target.get("synthetic"):
        head += " — SYNTHETIC DATA: says nothing about accuracy on the real data set"
    legend = (
        "olympic: MLPerf's mean without the fastest and the slowest run, a run that missed "
        "the target counting as the slowest; speed-up: the 1-worker median time over each "
        "run's (docs/checking.rst); price index: the price per hour over the 1-worker "
        "runs', divided by the speed-up of the medians (1: as dear as one worker; "
        "docs/results.rst)"
    )
    if not view.wide:
        legend = (
            "each cell is the median of the worker count's runs (--wide: with mean ± sd and "
            "cv, the olympic mean, min–max, communication); " + legend.split("; ", 1)[1]
        )
    notes += series_cost_note(stats)
    return "\n".join(
        [view.say(head), fit(series_columns(stats), groups, view)]
        + [view.say(line) for line in [*notes, legend]]
    )


def _format(path: str) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in ("png", "svg"):
        raise CliError(f"--plot {path}: the file must end in .png or .svg", EXIT_USAGE)
    return suffix


def _write(path: str, body: bytes) -> None:
    Path(path).write_bytes(body)
    print(f"wrote {path} ({len(body)} bytes)")


def _render(chart: str, data: dict, fmt: str, title: str) -> bytes:
    from mlbench_worker.shared import plots

    try:
        return plots.render(chart, data, fmt, title=title)
    except plots.PlotError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _get(master: Master, path: str) -> bytes:
    """GET a path of the API through the master's client (its errors, its token)."""
    return master.call("_submit", "GET", path).content


def _run_curves(master: Master, run_ids: list[int]) -> dict:
    """Several runs' accuracy curves in the statistics' shape: each stored val_accuracy
    point at its benchmark-clock time (its `elapsed`), as the master reads them."""
    curves, synthetic, target = [], False, {}
    for run_id in run_ids:
        run = master.json("get_run", run_id)
        points = master.call(
            "_submit",
            "GET",
            f"metrics/{run_id}/",
            params={"metric_type": "run", "metric_filter": "val_accuracy", "details": 1},
        ).json()
        curve = [
            [float(p["metadata"]["elapsed"]), float(p["value"])]
            for p in points.get("val_accuracy", [])
            if (p.get("metadata") or {}).get("elapsed") is not None
        ]
        synthetic |= run.get("dataset_used") == "synthetic"
        target = target or {"task": run.get("task"), "goal": run.get("target")}
        curves.append(
            {
                "run": run_id,
                "seed": run.get("seed"),
                "num_workers": run.get("num_workers"),
                "points": curve,
            }
        )
    return {"target": {**target, "synthetic": synthetic}, "curves": curves, "bands": []}


def cmd_report(args: argparse.Namespace, master: Master) -> int:
    """`mlbench report RUN...`, `--series ID`, with `--plot FILE` for a chart instead."""
    if bool(args.runs) == bool(args.series):
        raise CliError("give run ids or --series ID (one of the two)", EXIT_USAGE)
    if args.series:
        series = master.json("get_series", args.series)
        if args.plot:
            title = f"series {args.series} {series.get('name', '')}"
            _write(args.plot, _render(args.chart, series["statistics"], _format(args.plot), title))
        elif args.json:
            print(json.dumps(series.get("statistics"), indent=2))
        else:
            print(series_table(series, View.of(args)))
        return EXIT_OK
    if not args.plot:
        runs = [master.json("get_run", r) for r in args.runs]
        if args.json:
            body = report_json(master, runs, args.across_implementations)
            print(json.dumps(body, indent=2, sort_keys=True))
        else:
            print(report_table(master, runs, args.across_implementations, View.of(args)))
        return EXIT_OK
    fmt = _format(args.plot)
    if args.chart not in RUN_CHARTS:
        raise CliError(
            f"--chart {args.chart}: runs have {', '.join(RUN_CHARTS)}; a speed-up or a cost "
            "against workers needs a series (--series ID)",
            EXIT_USAGE,
        )
    if len(args.runs) == 1:  # the master's own chart of the run
        _write(args.plot, _get(master, f"runs/{args.runs[0]}/plots/{args.chart}.{fmt}"))
    elif args.chart == "accuracy":
        _write(args.plot, _render("accuracy", _run_curves(master, args.runs), fmt, "runs"))
    else:
        raise CliError(
            "--chart time-split draws one run (mlbench report RUN --plot ...) or a series "
            "(--series ID)",
            EXIT_USAGE,
        )
    return EXIT_OK


def download_mllog(args: argparse.Namespace, master: Master) -> int:
    """`mlbench download RUN --mllog` / `mlbench download --series ID --mllog`."""
    if args.series:
        path = args.output or f"series-{args.series}-mllog.zip"
        _write(path, _get(master, f"series/{args.series}/mllog/"))
    else:
        path = args.output or f"run-{args.run}-mllog.txt"
        _write(path, _get(master, f"runs/{args.run}/mllog/"))
    return EXIT_OK
