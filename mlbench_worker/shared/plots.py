"""Charts of runs and series for papers: PNG or SVG bytes drawn with matplotlib.

Shared by the master (the run and series pages' downloads) and the client
(`mlbench report --plot`), so a chart looks the same wherever it is made; torch-free, and
free of pyplot's global state (a `Figure` per chart, the Agg canvas), so the web server's
threads can draw at once.

Every chart draws the series statistics' shape (mlbench_master/results/statistics.py:
"target", "groups", "curves", "bands"), a run's chart being that of a one-run series. The
points each chart drew are read back from its artists and stored in the file itself
(`Description` metadata, JSON), so a reader (and the tests) can compare the picture with
the report's numbers without reading pixels.
"""

from __future__ import annotations

import io
import json
from typing import Any

CHARTS = ("accuracy", "speedup", "time-split", "cost")
FORMATS = ("png", "svg")
MISSING = "drawing charts needs matplotlib: pip install matplotlib (or pip install mlbench[master])"
SPLIT = (("data", "data loading"), ("compute", "compute"), ("communication", "exposed comm."))


class PlotError(ValueError):
    """A chart that cannot be drawn; the message says why and what to do."""


def render(chart: str, data: dict[str, Any], fmt: str, title: str = "") -> bytes:
    """The `chart` of `data` (series statistics) as `fmt` ("png" or "svg") bytes."""
    if fmt not in FORMATS:
        raise PlotError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    fig, drawn = figure(chart, data, title)
    described = json.dumps({"chart": chart, **drawn}, separators=(",", ":"))
    out = io.BytesIO()
    fig.savefig(
        out, format=fmt, dpi=120, metadata={"Title": fig.get_suptitle(), "Description": described}
    )
    return out.getvalue()


def figure(chart: str, data: dict[str, Any], title: str = "") -> tuple[Any, dict[str, Any]]:
    """The `chart` of `data` as a matplotlib Figure, and the points it drew (what `render`
    stores in the file); apart so a test can measure where its texts fall."""
    # Imported here, not with the module: the client's base install has no matplotlib
    # (only --plot needs it), and the master imports this module with its URLconf, where
    # matplotlib cost 0.7 s of every server process's start for a chart most never draw.
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError(MISSING) from None
    if chart not in CHARTS:
        raise PlotError(f"chart {chart!r} is not one of {', '.join(CHARTS)}")
    wide = chart in ("speedup", "cost")
    fig = Figure(figsize=(10, 4.5) if wide else (8, 5), layout="constrained")
    draw = {"accuracy": _accuracy, "speedup": _speedup, "time-split": _time_split, "cost": _cost}
    drawn = draw[chart](fig, data)
    target = data.get("target") or {}
    heading = title or f"{target.get('task', '')}"
    text = f"{heading}: {_TITLES[chart]}".strip(": ")
    if not target.get("synthetic"):
        fig.suptitle(text)
        return fig, drawn
    # The badge has the top row to itself, the title the row below and the axes the rest
    # (the layout's rect): beside the title the badge covered the end of a long one.
    points = fig.get_figheight() * 72
    fig.suptitle(text, y=1 - _BADGE_ROW_POINTS / points, va="top")
    fig.get_layout_engine().set(rect=(0, 0, 1, 1 - (_BADGE_ROW_POINTS + _TITLE_POINTS) / points))
    fig.text(
        0.99, 1 - 4 / points, "SYNTHETIC DATA", ha="right", va="top", color="white", fontsize=9,
        fontweight="bold", gid="synthetic-badge", bbox={"facecolor": "#c0392b", "edgecolor": "none", "pad": 3},
    )  # fmt: skip
    return fig, drawn


_BADGE_ROW_POINTS = 20  # the badge's height: 9 pt bold text and 3 pt of padding each side
_TITLE_POINTS = 22  # the title's line: matplotlib's "large" (12 pt) and its spacing


_TITLES = {
    "accuracy": "validation accuracy (or the goal's metric) against time",
    "speedup": "speed-up and efficiency against workers",
    "time-split": "where a step's time goes",
    "cost": "cost to target and price index against workers",
}


def _label(curve: dict) -> str:
    workers = curve["num_workers"]
    return f"run {curve['run']} (seed {curve['seed']}, {workers} worker{'s' * (workers != 1)})"


def _accuracy(fig: Any, data: dict) -> dict:
    ax = fig.add_subplot()
    lines: dict[str, list] = {}
    bands = [b for b in data.get("bands", []) if len(b["points"]) > 1]
    many = sum(1 for c in data.get("curves", []) if c["points"]) > 1
    for b in bands if many else []:
        xs = [p[0] for p in b["points"]]
        low, mid, high = ([p[i] for p in b["points"]] for i in (1, 2, 3))
        k = f"{b['num_workers']} worker{'s' * (b['num_workers'] != 1)}"
        ax.fill_between(xs, low, high, alpha=0.2, step="post", label=f"{k}: min–max")
        (line,) = ax.step(xs, mid, where="post", linestyle="--", label=f"{k}: median")
        lines[line.get_label()] = line.get_xydata().tolist()
    for c in data.get("curves", []):
        if not c["points"]:
            continue
        (line,) = ax.plot(
            [p[0] for p in c["points"]], [p[1] for p in c["points"]], marker="o", ms=3,
            linewidth=1, label=_label(c),
        )  # fmt: skip
        lines[line.get_label()] = line.get_xydata().tolist()
    aim = data.get("target") or {}
    target = aim.get("value")
    # A goal of another metric than accuracy (task 3's perplexity) is drawn in its own
    # numbers, on a log scale, reached from above.
    metric = aim.get("metric") or "val_accuracy"
    accuracy = metric == "val_accuracy"
    if target is not None:
        shown = f"{target:.1%}" if accuracy else f"{target:g}"
        ax.axhline(target, color="grey", linestyle=":", label=f"target {shown}")
    ax.set_xlabel("time on the benchmark clock (s)")
    if accuracy:
        ax.set_ylabel("validation accuracy (%)")
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    else:
        ax.set_ylabel(f"{metric.replace('_', ' ')} (lower is better)")
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=7, loc="lower right" if accuracy else "upper right")
    return {"lines": lines}


def _speedup(fig: Any, data: dict) -> dict:
    groups = [g for g in data.get("groups", []) if g.get("speedup")]
    if not groups:
        raise PlotError(
            "no speed-up to draw: it needs 1-worker runs that reached the target and runs "
            "of other worker counts that did"
        )
    workers = [g["num_workers"] for g in groups]
    lines = {}
    for ax, key, ideal, unit in (
        (fig.add_subplot(1, 2, 1), "speedup", workers, "speed-up (×, 1-worker median / run)"),
        (fig.add_subplot(1, 2, 2), "efficiency", [1.0] * len(workers), "efficiency (speed-up / workers)"),
    ):  # fmt: skip
        med = [g[key]["median"] for g in groups]
        lo = [g[key]["median"] - g[key]["min"] for g in groups]
        hi = [g[key]["max"] - g[key]["median"] for g in groups]
        ax.errorbar(workers, med, yerr=[lo, hi], marker="o", capsize=4, label="median, min–max")
        ax.plot(workers, ideal, color="grey", linestyle=":", label="ideal")
        ax.set_xlabel("workers")
        ax.set_ylabel(unit)
        ax.set_xticks(workers)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        lines[key] = [[w, m] for w, m in zip(workers, med, strict=True)]
    return {"lines": lines}


def _time_split(fig: Any, data: dict) -> dict:
    curves = [c for c in data.get("curves", []) if c.get("time_split")]
    if not curves:
        raise PlotError("no time split to draw: the runs reported no step timings yet")
    ax = fig.add_subplot()
    names = [_label(c) for c in curves]
    bottom = [0.0] * len(curves)
    bars = {}
    for key, text in SPLIT:
        ms = [1000 * float(c["time_split"].get(key, 0.0)) for c in curves]
        ax.barh(names, ms, left=bottom, label=text)
        bars[key] = ms
        bottom = [b + m for b, m in zip(bottom, ms, strict=True)]
    ax.set_xlabel("time per step (ms, mean over ranks)")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8)
    return {"bars": bars, "runs": [c["run"] for c in curves]}


def _cost(fig: Any, data: dict) -> dict:
    """Median cost to target with the cheapest and dearest run, and the price index
    (statistics.py: the price per hour over one worker's, divided by the speed-up)."""
    block = data.get("cost") or {}
    groups = [g for g in data.get("groups", []) if (g.get("cost_to_target") or {}).get("n")]
    if not groups:
        why = block.get("reason") or "no priced run reached the target"
        raise PlotError(f"no cost to draw: {why}")
    currency = block.get("currency") or ""
    workers = [g["num_workers"] for g in groups]
    stats = [g["cost_to_target"] for g in groups]
    med = [s["median"] for s in stats]
    ax = fig.add_subplot(1, 2, 1)
    ax.errorbar(
        workers, med, yerr=[[m - s["min"] for m, s in zip(med, stats, strict=True)],
        [s["max"] - m for m, s in zip(med, stats, strict=True)]], marker="o", capsize=4,
        label="median, cheapest–dearest run",
    )  # fmt: skip
    ax.set_ylabel(f"cost to target ({currency})")
    lines = {"cost_to_target": [[w, m] for w, m in zip(workers, med, strict=True)]}
    indexed = [g for g in data.get("groups", []) if g.get("price_index") is not None]
    right = fig.add_subplot(1, 2, 2)
    if indexed:
        index = [[g["num_workers"], g["price_index"]] for g in indexed]
        right.plot([w for w, _ in index], [v for _, v in index], marker="o", label="price index")
        lines["price_index"] = index
    right.axhline(1.0, color="grey", linestyle=":", label="as dear as 1 worker")
    right.set_ylabel("price index (price per hour ratio / speed-up)")
    for a in (ax, right):
        a.set_xlabel("workers")
        a.set_xticks(sorted({*workers, *(g["num_workers"] for g in indexed)}))
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    return {"lines": lines}
