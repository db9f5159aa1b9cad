"""The results board as static files: what `mlbench board --html DIR` writes.

Why static: a group publishes its board where no master runs (a project page, any static
host). So the pages carry their rows in the HTML itself (a browser opening a file cannot
fetch JSON beside it), link to each other and to `board.json` by relative paths, and need
no server; `board.json` is the master's answer unchanged, for readers that want data. Links
to runs and downloads point at the master that made the board (its URL is absolute).

The rows are the API's entries in the API's order: nothing is ranked or filtered here
except by the reader's own filters, which only hide rows.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

from mlbench_worker.client.cli.formatting import plural

JSON_NAME = "board.json"
INDEX = "index.html"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# The dimensions a reader filters on, as the rows' data attributes.
FILTERS = (
    "division", "measured", "data", "evaluation", "origin", "hardware", "workers",
    "algorithm", "implementation", "network", "backend",
)  # fmt: skip

STYLE = """body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}th{background:#eee}
.synthetic h2{color:#8a5a00}.note{color:#555}label{margin-right:1em}"""

# Hides the rows whose data attributes differ from a chosen filter (no request is made).
SCRIPT = """
document.querySelectorAll('select[data-filter]').forEach(function (box) {
  box.addEventListener('change', function () {
    var chosen = {};
    document.querySelectorAll('select[data-filter]').forEach(function (b) {
      if (b.value) chosen[b.dataset.filter] = b.value;
    });
    document.querySelectorAll('tr[data-entry]').forEach(function (row) {
      var shown = Object.keys(chosen).every(function (k) { return row.dataset[k] === chosen[k]; });
      row.hidden = !shown;
    });
    document.querySelectorAll('section[data-section]').forEach(function (s) {
      s.hidden = !s.querySelector('tr[data-entry]:not([hidden])');
    });
  });
});
"""


def pages(board: dict[str, Any], master_url: str) -> dict[str, str]:
    """File name -> text: board.json, index.html and one page per task of the board."""
    tasks = list(dict.fromkeys(s["task"] for s in board["sections"]))
    for task in tasks:
        if not SAFE_NAME.match(task):
            raise ValueError(f"task name {task!r} cannot name a file")
    out = {JSON_NAME: json.dumps(board, indent=1, sort_keys=True) + "\n"}
    out[INDEX] = _index(board, tasks)
    for task in tasks:
        sections = [s for s in board["sections"] if s["task"] == task]
        out[f"{task}.html"] = _task_page(board, task, sections, master_url.rstrip("/"))
    return out


def _head(title: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n"
    )


def _footer(board: dict[str, Any]) -> str:
    me = board["installation"]
    return (
        f'<p class="note">Made by installation <code>{escape(me["fingerprint"])}</code> '
        f"(public key <code>{escape(me['public_key'])}</code>). "
        f'Data: <a href="{JSON_NAME}">{JSON_NAME}</a>.</p>\n'
    )


def _index(board: dict[str, Any], tasks: list[str]) -> str:
    items = "".join(f'<li><a href="{escape(t)}.html">{escape(t)}</a></li>' for t in tasks)
    body = f"<ul>{items}</ul>" if tasks else "<p>No results yet.</p>"
    return (
        _head("Results board")
        + f"<h1>Results board</h1>{body}\n"
        + _footer(board)
        + "</body></html>\n"
    )


def _task_page(board: dict, task: str, sections: list[dict], master: str) -> str:
    rows = [e for s in sections for e in s["entries"]]
    boxes = "".join(_select(name, sorted({_value(e, name) for e in rows})) for name in FILTERS)
    parts = [
        _head(f"Results board: {task}"),
        f'<h1>Results board: {escape(task)}</h1><p><a href="{INDEX}">All tasks</a></p>',
        f'<form class="filters">{boxes}</form>',
    ]
    for kind, title in (
        ("real", "Real data"),
        ("synthetic", "Synthetic data (never ranked with real data)"),
    ):
        chosen = [s for s in sections if s["data"] == kind]
        if chosen:
            parts.append(f'<div class="{kind}"><h2>{title}</h2>')
            parts += [_section(s, master) for s in chosen]
            parts.append("</div>")
    parts += [_footer(board), f"<script>{SCRIPT}</script></body></html>\n"]
    return "\n".join(parts)


def _select(name: str, values: list[str]) -> str:
    options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
    return f'<label>{escape(name)} <select data-filter="{name}"><option value="">any</option>{options}</select></label>'


def _value(entry: dict[str, Any], name: str) -> str:
    if name == "origin":
        return (
            entry["origin"]["kind"]
            if entry["origin"]["kind"] == "local"
            else entry["origin"]["fingerprint"]
        )
    return str(entry[name])


HEADER = (
    "rank", "score", "workers", "hardware", "algorithm", "implementation", "network",
    "backend", "seeds", "statistics", "cost", "origin", "evaluation", "graded on", "runs",
)  # fmt: skip


def _section(section: dict[str, Any], master: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in HEADER)
    rows = "".join(_row(e, master) for e in section["entries"])
    return (
        f'<section data-section="{escape(section["label"])}"><h3>{escape(section["label"])}</h3>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _row(entry: dict[str, Any], master: str) -> str:
    data = " ".join(f'data-{n}="{escape(_value(entry, n))}"' for n in FILTERS)
    stats = entry["statistics"]
    valid = "valid" if stats["valid"] else f"not valid: {stats['invalid_reason']}"
    cost = entry["cost"]
    to_target = cost["cost_to_target"]["median"]
    cost_text = (
        f"{to_target:.4f} {cost['currency']} to target"
        if to_target is not None and cost["currency"]
        else cost["reason"] or "not priced"
    )
    links = " ".join(
        f'<a href="{escape(master + r["page"])}">run {r["id"]}</a> '
        f'(<a href="{escape(master + r["bundle"])}">bundle</a>, <a href="{escape(master + r["mllog"])}">MLPerf log</a>)'
        for r in entry["links"]["runs"]
    )
    cells = [
        str(entry["rank"]) if entry["rank"] is not None else f"unranked: {entry['unranked']}",
        score_text(entry),
        str(entry["workers"]),
        entry["hardware"],
        entry["algorithm"],
        entry["implementation"],
        entry["network"],
        entry["backend"],
        ", ".join(str(s) for s in entry["seeds"]),
        f"{plural(stats['runs'], 'run')}, {stats['reached']} reached; {valid}",
        cost_text,
        origin_text(entry),
        entry["evaluation"],
        entry.get("graded_on") or "",
    ]
    tds = "".join(f"<td>{escape(str(c))}</td>" for c in cells) + f"<td>{links}</td>"
    return f'<tr data-entry="{escape(entry["id"])}" {data}>{tds}</tr>'


def origin_text(entry: dict[str, Any]) -> str:
    """ "local FP", "imported FP, trusted (NAME)", "imported FP, unverified origin", and how
    this master's re-grade stands where it is not plain agreement."""
    origin = entry["origin"]
    text = f"{origin['kind']} {origin['fingerprint']}"
    label = (origin.get("trust") or {}).get("label")
    if origin["kind"] != "local" and label:
        text += f", {label}"
    status = (entry.get("regrade") or {}).get("status")
    if status in ("disputed", "not re-graded here"):
        text += f", {status}"
    return text


def score_text(entry: dict[str, Any]) -> str:
    score = entry["score"]
    if score is None:
        return "-"
    if entry["measured"] == "time_to_target":
        return f"{score:.1f} s to target (median)"
    if (entry.get("goal") or {}).get("metric") == "val_bleu":  # task 4b
        return f"BLEU {score:.2f} after time (median)"
    if entry.get("lower_is_better"):  # a perplexity (task 3)
        return f"perplexity {score:.2f} after time (median)"
    return f"{score * 100:.2f} % after time (median)"
