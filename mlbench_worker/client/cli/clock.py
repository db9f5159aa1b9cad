"""The benchmark clock: where a run is in time.

Why a module of its own: the benchmark clock starts at the first training step (mpirun and
data start-up are not part of the benchmark), so a time for a run is never wall time since
it started. A point's benchmark time is one fact, stored with it and served by the master
as the point's `elapsed` (summarized reads included; docs/api.rst): `point_time` reads it,
as the dashboard's clock.js and the master's results do. Only a point from a master that
serves none is placed by its date through the run's `elapsed` series (`clock_at`, the
dashboard's fallback too; tests/rules/clock_cases.json holds both to it). The progress line
reads the clock now (`benchmark_clock`).
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from mlbench_worker.client.cli.formatting import parse_time
from mlbench_worker.client.cli.master import FINAL_STATES
from mlbench_worker.shared.metric_points import ELAPSED


def metric_value(latest: dict[str, Any], name: str) -> float | None:
    try:
        return float(latest[name]["value"])
    except (KeyError, TypeError, ValueError):
        return None


def benchmark_clock(run: dict, latest: dict[str, Any], now: dt.datetime) -> float | None:
    """Seconds on the benchmark clock now, from the newest `elapsed` point; None without one.

    While the run is active the clock has gone on since that point was dated; once it ended
    the summary's `elapsed` (the worker's own final reading) wins."""
    summary = run.get("summary") or {}
    if run["state"] in FINAL_STATES and summary.get("elapsed") is not None:
        return float(summary["elapsed"])
    value = metric_value(latest, ELAPSED)
    if value is None:
        return None
    if run["state"] != "STARTED":
        return value
    dated = parse_time(latest[ELAPSED].get("date"))
    return value + max(0.0, (now - dated).total_seconds()) if dated else value


def point_time(point: dict, elapsed: list[dict]) -> float | None:
    """The benchmark time of a served point: its `elapsed` as the master stored it; only a
    point served without one (an older master) is placed by its date through the run's
    `elapsed` points (`clock_at`); None when neither says."""
    served = point.get(ELAPSED)
    if isinstance(served, int | float) and not isinstance(served, bool):
        return float(served)
    dated = parse_time(point.get("date"))
    return clock_at(elapsed, dated) if dated else None


def clock_at(elapsed: list[dict], date: dt.datetime) -> float | None:
    """Benchmark-clock seconds at `date`, from a run's `elapsed` points ({date, value}):
    linear between points, at wall speed before the first and after the last (the same
    rule as the dashboard's clock.js)."""
    pts = sorted(
        (d, float(p["value"]))
        for p in elapsed
        if (d := parse_time(p.get("date"))) is not None and p.get("value") is not None
    )
    if not pts:
        return None
    if date <= pts[0][0]:
        return pts[0][1] - (pts[0][0] - date).total_seconds()
    for (d0, v0), (d1, v1) in itertools.pairwise(pts):
        if date <= d1:
            span = (d1 - d0).total_seconds()
            return v1 if span <= 0 else v0 + (date - d0).total_seconds() / span * (v1 - v0)
    return pts[-1][1] + (date - pts[-1][0]).total_seconds()
