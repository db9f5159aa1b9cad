"""Whose accuracy a run's results show, and what each number means: the evaluator's grades
where it graded the run, else the run's own word (marked), and the accuracy after time of
a run its budget stopped, said at its budget.

Why a module of its own: `mlbench report`, `mlbench show` and `mlbench run --wait` print
these the same way; which accuracy counts is decided on the master
(mlbench_master/results/stored.py) and read here from the run's `evaluation` field.
"""

from __future__ import annotations

from mlbench_worker.client.cli.audit_line import audit_line
from mlbench_worker.client.cli.formatting import duration, graded_value, percent, plural

EVALUATED, SELF_REPORTED = "evaluated", "self-reported, not evaluated"
BUDGET_SPENT = "time budget spent"  # the worker's stop_reason when the budget stopped it


def after_time(run: dict, s: dict) -> tuple[str, str]:
    """The ACC AFTER TIME cell and, for a run its time budget stopped, the note that says
    what the number is.

    Accuracy after time is the accuracy of the model at the end of the budget (the seed's
    rule): training stops when the budget is spent and that model is evaluated. The clock
    after its evaluation reads later (a 20 s budget's evaluation may end at 35 s), so such
    a run is shown at its budget, "10.2% @ 20s budget", not at that clock. Any other run
    (the target reached, the epochs done, no summary yet) is shown at the benchmark
    clock of its last evaluation."""
    if s.get("final_val_accuracy") is None:
        return "-", ""
    accuracy = percent(s["final_val_accuracy"])
    budget = (s.get("config") or {}).get("time_budget") or run.get("effective_time_budget")
    if s.get("stop_reason") == BUDGET_SPENT and budget:
        clock = f"; the clock read {duration(s['elapsed'])} after it" if s.get("elapsed") else ""
        note = (
            f"run {run['id']}: accuracy after time is the accuracy of the model at the end of "
            f"its {duration(budget)} time budget (evaluated once training stopped{clock})"
        )
        return f"{accuracy} @ {duration(budget)} budget", note
    return (f"{accuracy} @ {duration(s['elapsed'])}" if s.get("elapsed") else accuracy), ""


def time_to_target(run: dict) -> float | None:
    """The evaluator's time to target where it graded the run, else the run's own."""
    graded = run.get("evaluation") or {}
    if graded.get("status") == EVALUATED:
        return graded.get("time_to_target")
    return (run.get("summary") or {}).get("time_to_target")


def target_line(run: dict) -> str:
    """The run's time to target as `mlbench show` says it ("" when it has none). Past its
    time budget the target was reached by the evaluation of the model once training
    stopped, and the benchmark clock then includes that evaluation (as `after_time`'s note
    says): so a time to target longer than the budget is not read as training past it."""
    ttt = time_to_target(run)
    if ttt is None:
        return ""
    summary = run.get("summary") or {}
    budget = (summary.get("config") or {}).get("time_budget") or run.get("effective_time_budget")
    if budget and ttt > budget:
        return (
            f"{duration(ttt)} (past its {duration(budget)} time budget: reached by the "
            "evaluation once training stopped; the clock includes that evaluation)"
        )
    return duration(ttt)


def evaluation_line(run: dict) -> str:
    """Who graded the run, for `mlbench show`: the evaluator (with its result), the run
    itself, or nobody yet ("")."""
    graded = run.get("evaluation") or {}
    if graded.get("status") == SELF_REPORTED:
        return "the run itself: self-reported, not evaluated"
    if graded.get("status") != EVALUATED:
        return ""
    ttt = graded.get("time_to_target")
    reached = f"target reached at {duration(ttt)}" if ttt is not None else "target not reached"
    after = graded_value(graded.get("metric"), graded.get("accuracy_after_time"))
    n = graded.get("grades") or 0
    counted = f"{plural(n, 'evaluation')} graded"
    return f"the evaluator ({counted}; last {after}, {reached})"


def evaluation_notes(run: dict) -> list[str]:
    """What a reader must know of who graded a run: its own numbers only (marked * in the
    table), or where they stray from the evaluator's grade (both numbers)."""
    graded = run.get("evaluation") or {}
    if graded.get("status") == SELF_REPORTED:
        return [f"* run {run['id']}: {SELF_REPORTED} (its own accuracy; no predictions graded)"]
    out = []
    metric = graded.get("metric")
    margin = float(graded.get("tolerance") or 0)
    for m in graded.get("mismatches") or []:
        out.append(
            f"run {run['id']} MISMATCH at step {m['step']}: it reported "
            f"{graded_value(metric, m['reported'])}, the evaluator graded "
            f"{graded_value(metric, m['graded'])} (tolerance "
            + (f"{margin:g} BLEU)" if metric == "val_bleu" else f"{100 * margin:g} points)")
        )
    audit = graded.get("audit") or {}
    if audit.get("status") in ("mismatch", "refused"):
        out.append(f"run {run['id']} MODEL AUDIT {audit['status'].upper()}: {audit_line(run)}")
    return out
