"""A chaos series in numbers: runs by end state, faults by kind, which invariants held, and
how long the platform took to recover from each kind of fault; as a dict (written as JSON
for docs/results.rst) and as the table `make chaos` prints.

Two recovery times per fault: `api_s`, from the fault's start until the health check first
answered 200 once the fault was over (a pause or an outage counts in full); `run_end_s`,
for a fault that ended a run (the run's reason names it), from the fault's start until the
run's end state was written: how long the platform took to notice and say so.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from tests.chaos import reasons
from tests.chaos.evidence import Evidence
from tests.chaos.invariants import api_back, final_write


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
    }


def summarize(
    settings: Any, ev: Evidence, violations: dict[str, list[str]], wall_s: float
) -> dict[str, Any]:
    ends = Counter()
    for run in ev.submitted:
        final = final_write(ev, run.run_id)
        ends[final.new if final else ev.unfinished.get(run.run_id, "unknown")] += 1
    faults: dict[str, dict[str, Any]] = {}
    api: dict[str, list[float]] = {}
    run_end: dict[str, list[float]] = {}
    for fault in ev.faults:
        entry = faults.setdefault(fault.kind, {"injected": 0, "skipped": 0, "skip_reasons": []})
        if fault.skipped:
            entry["skipped"] += 1
            entry["skip_reasons"] = sorted(set(entry["skip_reasons"]) | {fault.skipped})
            continue
        entry["injected"] += 1
        back = api_back(ev, fault)
        if back is not None:
            api.setdefault(fault.kind, []).append(back)
        if fault.run_id is not None:
            final = final_write(ev, fault.run_id)
            reason = ev.runs.get(fault.run_id, {}).get("reason") or (final.reason if final else "")
            if final and final.new != "FINISHED" and fault.start is not None:
                if reasons.names(reason, fault.kind, fault.details):
                    run_end.setdefault(fault.kind, []).append(final.at - fault.start)
    return {
        "seed": settings.seed,
        "driver": settings.driver,
        "wall_s": round(wall_s, 1),
        "runs": {"asked": len(ev.submitted), **dict(ends)},
        "faults": faults,
        "invariants": {
            name: {"held": not found, "violations": len(found)}
            for name, found in violations.items()
        },
        "recovery_s": {
            kind: {"api_s": _spread(api.get(kind, [])), "run_end_s": _spread(run_end.get(kind, []))}
            for kind in faults
        },
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as lines a person reads at the end of `make chaos`."""
    runs = summary["runs"]
    lines = [
        f"chaos series: seed {summary['seed']}, {summary['driver']} driver, "
        f"{summary['wall_s']:.0f} s",
        "runs: " + ", ".join(f"{k} {v}" for k, v in runs.items()),
        f"{'fault':<18}{'injected':>9}{'skipped':>9}{'API back s (med/max)':>24}"
        f"{'run ended s (med/max)':>24}",
    ]
    for kind, entry in sorted(summary["faults"].items()):
        times = summary["recovery_s"][kind]
        cells = []
        for key in ("api_s", "run_end_s"):
            spread = times[key]
            cells.append(f"{spread['median']:.1f} / {spread['max']:.1f}" if spread else "-")
        lines.append(
            f"{kind:<18}{entry['injected']:>9}{entry['skipped']:>9}{cells[0]:>24}{cells[1]:>24}"
        )
    held = summary["invariants"]
    lines.append(f"invariants held: {sum(v['held'] for v in held.values())} of {len(held)}")
    for name, verdict in held.items():
        mark = "held" if verdict["held"] else f"VIOLATED ({verdict['violations']})"
        lines.append(f"  {name}: {mark}")
    return "\n".join(lines)
