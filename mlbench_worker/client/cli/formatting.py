"""Formatting for the terminal: tables, durations, percentages, shortened text, API dates.

Why a module of its own: every command prints runs the same way (a plain aligned table,
"1m40s" durations, "72.0%" accuracies, "-" for what is unknown), and the dates the API
serves are read in one place. Pure functions only: nothing here talks to the master.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from mlbench_worker.shared.algorithm_catalogue import describe


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def percent(value: Any) -> str:
    try:
        return f"{100 * float(value):.1f}%"
    except (TypeError, ValueError):
        return "-"


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def run_duration(run: dict, now: dt.datetime | None = None) -> float | None:
    """Wall time since the run started (start-up included), to its end or `now`."""
    start = parse_time(run.get("started_at"))
    if start is None:
        return None
    end = parse_time(run.get("finished_at")) or now or dt.datetime.now(dt.UTC)
    return (end - start).total_seconds()


def short(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def runs_list(body: Any) -> list[dict]:
    if isinstance(body, dict) and "results" in body:
        return body["results"]
    return list(body or [])


def algorithm_text(run: dict[str, Any]) -> str:
    """A run's algorithm with all its options, e.g. "powersgd (rank 2)"; "" when it has none
    (a measurement, a custom command)."""
    return describe(run.get("algorithm") or "", run.get("algorithm_options"), every=True)


def implementation_of(run: dict[str, Any]) -> str:
    """A run's implementation (reference, torch-ddp, tensorflow, spark): "reference" for a run
    stored before there were implementations (no field; the migration gave those
    "reference" too), "" for one that has none (a measurement, a custom command). The
    dashboard reads it the same way (comparable.js `implementationOf`)."""
    name = run.get("implementation")
    return "reference" if name is None else name


# How a framework is named for people, and the key of the worker summary's `versions`
# that holds its version.
_FRAMEWORK_TITLES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "spark": "Spark"}
_VERSION_KEYS = {"pytorch": "torch", "tensorflow": "tensorflow", "spark": "pyspark"}


def framework_text(run: dict[str, Any]) -> str:
    """The framework a run's implementation ran on, with its version: "PyTorch 2.3.1"; the
    workers' version (summary.versions) before the master's (manifest.framework), since the
    workers' is the one that trained; "" without a framework. A run from before manifests
    named the framework is read from its versions alone."""
    if not implementation_of(run):
        return ""
    versions = (run.get("summary") or {}).get("versions") or {}
    recorded = (run.get("manifest") or {}).get("framework") or {}
    name = recorded.get("name") or (
        "tensorflow" if versions.get("tensorflow") else "pytorch" if versions.get("torch") else ""
    )
    if not name:
        return ""
    version = versions.get(_VERSION_KEYS.get(name, name)) or recorded.get("version")
    title = _FRAMEWORK_TITLES.get(name, name)
    return f"{title} {version}" if version else f"{title}, version not reported yet"


def implementation_text(run: dict[str, Any]) -> str:
    """ "torch-ddp (PyTorch 2.3.1)": the implementation and its framework with version; ""
    for a run that has none. The dashboard says it the same way (format.js)."""
    name = implementation_of(run)
    if not name:
        return ""
    framework = framework_text(run)
    return f"{name} ({framework})" if framework else name


def size(count: float) -> str:
    """A number of bytes in decimal units: 950 B, 1.2 kB, 3.4 MB, 1.0 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"
