"""Formatting for the terminal: tables that fit it, durations, percentages, counted nouns,
shortened and wrapped text, API dates.

Why a module of its own: every command prints runs the same way (a plain aligned table,
"1m40s" durations, "72.0%" accuracies, "-" for what is unknown, "1 worker" but "2
workers"), every table fits the terminal the same way (`View`, `Column`, `fit`), and the
dates the API serves are read in one place. Pure functions only: nothing here talks to the
master.

The width rule (docs/cli.rst, "Tables and the terminal"): the width is COLUMNS when that
is set, else the terminal's, else 120 (a pipe, a file, a CI log). A table's default view
shows the columns that matter, in their order; when they do not fit, the long text cells
(names, reasons, origins) are shortened with "…" down to their least width, then the
least important columns are left out, and a line under the table names them: "(to fit
80 columns, left out: TARGET, STATE; --wide shows all)". Numbers are never cut: a cell
with a unit keeps it. `--wide` shows every column, whole, whatever the width. Prose
(notes, warnings) is wrapped where the width is known (a terminal, or COLUMNS), never
into a pipe or a file: a reader or grep there takes each note as one line.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlbench_worker.shared.algorithm_catalogue import describe

DEFAULT_WIDTH = 120  # when the output is no terminal and COLUMNS is not set
GAP = "  "


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Every cell whole, aligned under its header, a rule of dashes under the headers."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return _lines(cells, widths)


def _lines(cells: list[list[str]], widths: list[int]) -> str:
    lines = [
        GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, GAP.join("-" * w for w in widths))
    return "\n".join(lines)


def terminal_width() -> int:
    """COLUMNS when it is set (a whole number), else the width of the terminal standard
    output is, else DEFAULT_WIDTH."""
    return _terminal()[0]


def _terminal() -> tuple[int, bool]:
    """(the width, whether it is known: COLUMNS or a terminal)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns, True
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns or DEFAULT_WIDTH, True
    except (AttributeError, OSError, ValueError):
        pass
    return DEFAULT_WIDTH, False


@dataclass(frozen=True)
class View:
    """How a command prints: `wide` (every column, whole, nothing wrapped) or its tables
    fitted to `width` columns, and its prose wrapped to them where `prose` (the width is
    the terminal's, or COLUMNS)."""

    width: int = DEFAULT_WIDTH
    wide: bool = False
    prose: bool = True

    @classmethod
    def of(cls, args: Any) -> View:
        """The view a command line asks for: `--wide`, else the terminal's width."""
        width, known = _terminal()
        return cls(width, bool(getattr(args, "wide", False)), known)

    @property
    def wraps(self) -> bool:
        return self.prose and not self.wide

    def say(self, text: str) -> str:
        """A line of prose (a note, a warning) wrapped to the width, continued with an
        indent of two; whole in the wide view and where the output is no terminal."""
        return wrap(text, self.width if self.wraps else None)


WIDE = View(wide=True)


def view_options(parser: Any, json_help: str = "print the master's answer as JSON") -> None:
    """--wide and --json of a command that prints a table."""
    parser.add_argument(
        "--wide", "-w", action="store_true",
        help="every column, whole (by default the table fits the terminal's width)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help=json_help)


def wrap(text: str, width: int | None, indent: str = "  ") -> str:
    """`text` broken at spaces into lines of at most `width` (a word longer than that, a
    URL, stays whole), each line after the first indented; `text` itself without a width."""
    if width is None or len(text) <= width:
        return text
    out = []
    for part in text.split("\n"):
        out += textwrap.wrap(
            part, width, subsequent_indent=indent, break_long_words=False,
            break_on_hyphens=False,
        ) or [""]  # fmt: skip
    return "\n".join(out)


@dataclass(frozen=True)
class Column:
    """A column of a table that fits the terminal.

    `cell(row)` is its text in the wide view; `brief(row)`, where given, its shorter text in
    the default view (a median without its spread, a value without its name). `header` and
    `brief_header` likewise. `wide`: shown only with --wide. `drop`: the order in which a
    narrow terminal leaves columns out, highest first (0: never). `least`: a text column
    may be shortened with "…" down to this width (0: never shortened: numbers keep their
    units); `most`: the widest it is in the default view (0: as wide as its text)."""

    header: str
    cell: Callable[[Any], Any]
    brief: Callable[[Any], Any] | None = None
    brief_header: str = ""
    wide: bool = False
    drop: int = 0
    least: int = 0
    most: int = 0


def fit(columns: Sequence[Column], rows: Sequence[Any], view: View) -> str:
    """The table of `rows` in `view`: in the wide view every column whole; else the
    default view's columns, shortened and then left out (least important first) until they
    fit the width, with a line under the table naming what was left out."""
    if view.wide:
        return table([c.header for c in columns], [[c.cell(r) for c in columns] for r in rows])
    chosen = [c for c in columns if not c.wide]
    texts = {id(c): [" ".join(_text((c.brief or c.cell)(r)).split()) for r in rows] for c in chosen}
    left_out: list[str] = []
    while True:
        widths = _widths(chosen, texts, view.width)
        droppable = [c for c in chosen if c.drop]
        if sum(widths) + len(GAP) * (len(chosen) - 1) <= view.width or not droppable:
            break
        gone = max(droppable, key=lambda c: c.drop)
        chosen.remove(gone)
        left_out.append(gone.brief_header or gone.header)
    headers = [c.brief_header or c.header for c in chosen]
    body = [[short(texts[id(c)][i], w) for c, w in zip(chosen, widths, strict=True)]
            for i in range(len(rows))]  # fmt: skip
    text = _lines([headers, *body], widths)
    if left_out:
        text += "\n" + view.say(
            f"(to fit {view.width} columns, left out: {', '.join(left_out)}; --wide shows all)"
        )
    return text


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _widths(chosen: list[Column], texts: dict[int, list[str]], width: int) -> list[int]:
    """Each column's width: its longest cell (at most `most`), its header at least; the
    widest shortenable column narrowed first, one place at a time, until the row fits or
    none is above its `least`."""
    widths = []
    for c in chosen:
        longest = max((len(t) for t in texts[id(c)]), default=0)
        if c.most:
            longest = min(longest, c.most)
        widths.append(max(longest, len(c.brief_header or c.header)))
    excess = sum(widths) + len(GAP) * (len(chosen) - 1) - width
    while excess > 0:
        floors = [max(c.least, len(c.brief_header or c.header)) if c.least else w
                  for c, w in zip(chosen, widths, strict=True)]  # fmt: skip
        can = [i for i, w in enumerate(widths) if w > floors[i]]
        if not can:
            break
        i = max(can, key=lambda k: widths[k])
        widths[i] -= 1
        excess -= 1
    return widths


def plural(n: int | float, noun: str, nouns: str = "") -> str:
    """ "1 worker", "2 workers", "0 workers", "1.5 cores": the noun as it is for exactly
    one, else `nouns` (default: the noun and an s). Every count the commands print goes
    through here."""
    shown = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{shown} {noun if n == 1 else nouns or noun + 's'}"


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


def graded_value(metric: Any, value: Any) -> str:
    """A grade or a run's own value of its goal `metric`: BLEU (task 4b, 0..100) as a number,
    an accuracy (0..1) as a percentage."""
    if metric == "val_bleu":
        try:
            return f"BLEU {float(value):.2f}"
        except (TypeError, ValueError):
            return "-"
    return percent(value)


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
    (a measurement, a custom command). An uploaded algorithm adds its file's short hash,
    "halfavg (weight 0.5) [uploaded 1a2b3c4d5e6f]": two files may share a NAME."""
    text = describe(run.get("algorithm") or "", run.get("algorithm_options"), every=True)
    sha = run.get("algorithm_source") or ""
    return f"{text} [uploaded {sha[:12]}]" if sha and text else text


def implementation_of(run: dict[str, Any]) -> str:
    """A run's implementation (reference, torch-ddp, tensorflow, spark, flink): "reference"
    for a run stored before there were implementations (no field; the migration gave those
    "reference" too), "" for one that has none (a measurement, a custom command). The
    dashboard reads it the same way (comparable.js `implementationOf`)."""
    name = run.get("implementation")
    return "reference" if name is None else name


# How a framework is named for people, and the key of the worker summary's `versions`
# that holds its version.
_FRAMEWORK_TITLES = {
    "pytorch": "PyTorch", "tensorflow": "TensorFlow", "spark": "Spark", "flink": "Flink",
}  # fmt: skip
_VERSION_KEYS = {
    "pytorch": "torch", "tensorflow": "tensorflow", "spark": "pyspark", "flink": "pyflink",
}  # fmt: skip


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
