"""What the benchmark reports: metric points per cell, the summary record, the printed table.

Points (rank 0 only), three per (op, backend, size), each valued by the median repeat and
carrying the cell in its metadata, so the API's metric queries return whole curves (one
series per metric name; the dashboard splits them by `op` and `backend`):

- ``latency_us``: the collective's time in microseconds;
- ``busbw_mbps``: bus bandwidth in Mbit/s (what the charts draw);
- ``algbw_mbps``: algorithm bandwidth in Mbit/s.

metadata: ``op``, ``backend``, ``size`` (bytes), ``workers``, ``repeats``, ``warmup``,
``capped``, ``best`` (the same quantity from the fastest repeat) and ``elapsed`` (seconds
since the sweep began). The formulas are in stats.py.
"""

from __future__ import annotations

from mlbench_worker.backend_benchmark import TASK
from mlbench_worker.backend_benchmark.sizes import label
from mlbench_worker.backend_benchmark.stats import OP_TITLES
from mlbench_worker.backend_benchmark.sweep import Outcome, Plan
from mlbench_worker.shared.result import measurement_summary
from mlbench_worker.training.metric_sink import Reporter

# metric name -> (median field of a row, best field of a row)
METRICS = {
    "latency_us": ("latency_median_us", "latency_best_us"),
    "busbw_mbps": ("busbw_median_mbps", "busbw_best_mbps"),
    "algbw_mbps": ("algbw_median_mbps", "algbw_best_mbps"),
}
CAPPED_NOTE = "* fewer repeats than asked: the size's time cap or the time budget was reached"
CELL_FIELDS = ("op", "backend", "size", "workers", "repeats", "warmup", "capped")


def post_row(reporter: Reporter, row: dict, elapsed: float) -> None:
    """The three points of one measured cell."""
    cell = {k: row[k] for k in CELL_FIELDS}
    for name, (median, best) in METRICS.items():
        reporter.metric(name, row[median], **cell, best=row[best], elapsed=round(elapsed, 3))


def peak(rows: list[dict]) -> dict | None:
    """The row with the highest median bus bandwidth: the run's headline number."""
    return max(rows, key=lambda r: r["busbw_median_mbps"], default=None)


def summary_record(
    plan: Plan,
    outcome: Outcome,
    *,
    workers: int,
    device: str,
    threads: int,
    versions: dict,
    hardware: dict,
    run_id: str | None,
) -> dict:
    """The run's summary (POST /api/runs/<id>/summary/): the results table and the machine."""
    top = peak(outcome.rows)
    return measurement_summary(
        task=TASK,
        num_workers=workers,
        backend=",".join(plan.backends),
        backends=list(plan.backends),
        ops=list(plan.ops),
        device=device,
        busbw_mbps=top["busbw_median_mbps"] if top else None,
        peak={k: top[k] for k in ("op", "backend", "size")} if top else None,
        results=outcome.rows,
        measured=len(outcome.rows),
        not_measured=outcome.not_measured,
        stop_reason=outcome.stop_reason,
        elapsed=outcome.elapsed,
        versions=versions,
        hardware=hardware,
        run_id=run_id,
        config={
            "sizes": list(plan.sizes),
            "warmup": plan.warmup,
            "repeats": plan.repeats,
            "min_repeats": plan.min_repeats,
            "size_time_cap": plan.size_time_cap,
            "time_budget": plan.time_budget,
            "threads": threads,
        },
    )


def table(summary: dict) -> str:
    """The table rank 0 prints at the end: one line per cell, then what the run was."""
    headers = ("op", "backend", "size", "repeats", "lat best us", "lat median us",
               "busbw best Mbit/s", "busbw median Mbit/s", "algbw median Mbit/s")  # fmt: skip
    lines = []
    for r in summary["results"]:
        lines.append((
            OP_TITLES[r["op"]], r["backend"], label(r["size"]),
            f"{r['repeats']}{'*' if r['capped'] else ''}",
            f"{r['latency_best_us']:.1f}", f"{r['latency_median_us']:.1f}",
            f"{r['busbw_best_mbps']:.1f}", f"{r['busbw_median_mbps']:.1f}",
            f"{r['algbw_median_mbps']:.1f}",
        ))  # fmt: skip
    widths = [max([len(h), *(len(line[i]) for line in lines)]) for i, h in enumerate(headers)]
    text = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    text += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    v = summary["versions"]
    top = summary["peak"]
    best = (
        f"{summary['busbw_mbps']:.1f} Mbit/s ({OP_TITLES[top['op']]}, {top['backend']}, "
        f"{label(top['size'])})"
        if top
        else "-"
    )
    rule = "=" * max(len(t) for t in text)
    return "\n".join([
        rule, f"mlbench result: {TASK}", rule, *text, rule,
        f"workers {summary['num_workers']}, device {summary['device']}, "
        f"backends {summary['backend']}, {summary['elapsed']:.1f} s",
        f"highest bus bandwidth (median): {best}",
        f"stopped because: {summary['stop_reason']}",
        *([CAPPED_NOTE] if any(r["capped"] for r in summary["results"]) else []),
        f"python {v['python']}, torch {v['torch']}, MPI {v['mpi']}",
        rule,
    ])  # fmt: skip
