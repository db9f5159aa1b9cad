# Over 400 lines: the report table and the one comparison rule it applies (held to the dashboard's
# copy by tests/rules/), read together; the rule moves out when the report grows again.
"""Comparing runs: the `mlbench report` table, and which runs may be compared at all.

Why a module of its own: a speed-up only means something between runs that differ in the
number of workers and nothing else, and a synthetic-data result must never pass for a
CIFAR-10 one. The rule (`setup_differences`, the 1-worker `baseline`, the warning about
mixed runs) lives here; the dashboard's compare page keeps the same rule in
static/dashboard/js/comparable.js, and tests/rules/comparison_cases.json holds both to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlbench_worker.client.cli.accuracy import (
    EVALUATED,
    SELF_REPORTED,
    after_time,
    evaluation_notes,
    time_to_target,
)
from mlbench_worker.client.cli.clock import point_time
from mlbench_worker.client.cli.costs import cost_cell, cost_notes, cost_to_target
from mlbench_worker.client.cli.formatting import (
    WIDE,
    Column,
    View,
    algorithm_text,
    duration,
    fit,
    implementation_of,
    implementation_text,
    percent,
    size,
)
from mlbench_worker.client.cli.master import FINAL_STATES, CliError, Master
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.metric_points import ELAPSED, TIME_TO_TARGET, VAL_ACCURACY

# Every metric some task posts its throughput as (images_per_sec, samples_per_sec, ...).
THROUGHPUT_METRICS = list(dict.fromkeys(t.throughput_metric for t in catalogue.TASKS.values()))
REPORT_METRICS = ",".join([VAL_ACCURACY, ELAPSED, TIME_TO_TARGET, *THROUGHPUT_METRICS])
# The unit of a run that reported no throughput the catalogue knows: every task counts
# samples of some kind, while "images" would be wrong for most.


def throughput_of(
    run: dict, has: Callable[[str], bool] = lambda metric: False
) -> tuple[str | None, str]:
    """(metric, unit) of a run's throughput (`catalogue.throughput_of`): its task's, else
    the metric its summary holds, else one `has` says its series holds."""
    summary = run.get("summary") or {}
    name = run.get("task") or summary.get("task")
    return catalogue.throughput_of(name, lambda m: summary.get(m) is not None, has)


def _throughput(run: dict, summary: dict) -> tuple[float | None, str]:
    """The run's throughput (from its summary or the series it was derived from) and unit."""
    metric, unit = throughput_of(run, lambda m: summary.get(m) is not None)
    value = summary.get(metric) if metric else None
    return (float(value) if value else None), unit


def report_table(
    master: Master | None,
    runs: list[dict],
    across_implementations: bool = False,
    view: View = WIDE,
) -> str:
    """Runs side by side: time to target, accuracy after time, throughput, speed-up, comm
    share, cost; every column in the wide `view`, the ones that matter first fitted to
    the terminal in the default view (`report_columns`). The warning above the table and
    the notes under it are `compare`'s."""
    records, notes, warning = compare(master, runs, across_implementations)
    return "\n".join(
        ([view.say(warning)] if warning else [])
        + [fit(report_columns(records), records, view)]
        + [view.say(note) for note in notes]
    )


def report_json(
    master: Master | None, runs: list[dict], across_implementations: bool = False
) -> dict[str, Any]:
    """`mlbench report RUN... --json`: each run's numbers (seconds, fractions, the
    throughput with its unit, the speed-up with what it was taken from), the warning and
    the notes, for scripts."""
    records, notes, warning = compare(master, runs, across_implementations)
    return {
        "runs": [{k: v for k, v in r.items() if k not in ("text", "run")} for r in records],
        "warning": warning or None,
        "notes": notes,
    }


def report_columns(records: list[dict]) -> list[Column]:
    """The report's columns. Throughput is in the unit of each run's task
    (`throughput_of`): when every run counts the same thing the column is named after it
    (IMAGES/S, SAMPLES/S), else it is THROUGHPUT and each cell carries its unit, so
    images/s and samples/s are never read as one scale."""
    units = {r["throughput_unit"] for r in records}
    one_unit = units.pop() if len(units) == 1 else None

    def rate(r: dict) -> str:
        value = r["throughput"]
        shown = f"{value:.0f}" if value else "-"
        return shown if one_unit or not value else f"{shown} {r['throughput_unit']}"

    def text(key: str, brief: bool = False) -> Callable[[dict], Any]:
        return lambda r: r["text"][key + (" brief" if brief else "")]

    return [
        Column("ID", lambda r: r["id"]),
        Column("NAME", lambda r: r["name"], most=24, least=10),
        Column("STATE", lambda r: r["state"], drop=4),
        Column("WORKERS", lambda r: r["num_workers"], drop=1),
        Column("ALGORITHM", lambda r: r["algorithm"] or "-", wide=True),
        Column("IMPLEMENTATION", lambda r: r["implementation"] or "-", wide=True),
        Column("DATASET", lambda r: r["text"]["dataset"], wide=True),
        Column("TARGET", text("target"), brief=text("target", True), drop=5),
        Column("TIME TO TARGET", text("time to target")),
        Column("ACC AFTER TIME", text("after time")),
        Column(one_unit.upper() if one_unit else "THROUGHPUT", rate),
        Column("SPEED-UP", text("speed-up"), brief=text("speed-up", True), drop=2),
        Column("COMM", lambda r: percent(r["comm_share"]), wide=True),
        Column("SENT/STEP", text("sent"), wide=True),
        Column("SENT TO TARGET", text("sent to target"), wide=True),
        Column(
            "COST TO TARGET / RUN",
            lambda r: cost_cell(r["run"]),
            brief=lambda r: cost_to_target(r["run"]),
            brief_header="COST TO TARGET",
            drop=3,
        ),
    ]


def compare(
    master: Master | None, runs: list[dict], across_implementations: bool = False
) -> tuple[list[dict[str, Any]], list[str], str]:
    """Each run's record for the report (its numbers, and under "text" its cells), the
    notes under the table, and the warning above it ("" when the runs may be compared).

    Speed-up is against a 1-worker run among `runs` with the same set-up
    (`setup_differences`); a 1-worker run is its own baseline (1.00x). It compares times
    to target when both reached it, else throughput (marked "thr"). Without a comparable
    1-worker run the column says "-" and a note under the table says why; a warning line
    above it says when the runs differ in data set or task.

    Runs of different implementations get no speed-up against each other unless
    `across_implementations` (`mlbench report --across-implementations`) asks for the
    cross-implementation ratio; such a ratio is labelled "vs <implementation>
    (cross-implementation)" and a note says what it measures.
    """
    records = []
    notes = []
    for run in runs:
        s = run.get("summary") or {}
        reported = bool(s)
        if not reported and master is not None and run.get("state") != "INITIALIZED":
            s = _summary_from_series(master, run)
        goal = s.get("target") or run.get("target")
        goal_value = s.get("target_accuracy")
        graded = run.get("evaluation") or {}
        if graded.get("status") == EVALUATED:  # the evaluator's numbers, not the run's own
            s = {**s, "time_to_target": graded.get("time_to_target")}
            s["final_val_accuracy"], s["elapsed"] = graded["accuracy_after_time"], graded["elapsed"]
            reported = reported or run.get("state") in FINAL_STATES
        ttt = s.get("time_to_target")
        reached = duration(ttt) if ttt is not None else ("not reached" if reported else "-")
        after, note = after_time(run, s)
        notes += [note] if note else []
        notes += evaluation_notes(run)
        if graded.get("status") == SELF_REPORTED:
            after += " *"
        rate, unit = _throughput(run, s)
        base, why = baseline(run, runs, across_implementations)
        ratio, by, across = _speedup(run, base) if base is not None else (None, "", "")
        # A lone run has nothing to be compared with: a note would only be noise.
        if why and len(runs) > 1 and (run.get("num_workers") or 0) > 1:
            notes.append(f"speed-up of run {run['id']}: {why}" + _across_hint(why))
        if base is not None and implementation_of(base) != implementation_of(run):
            on = f" on {base.get('backend')}" if base.get("backend") != run.get("backend") else ""
            notes.append(
                f"speed-up of run {run['id']} is a cross-implementation ratio (against run "
                f"{base['id']}, {implementation_of(base)}{on}): it measures the framework as "
                "well as the scaling"
            )
        if run.get("resumed_from") is not None:
            notes.append(_resumed_note(run))
        notes += cost_notes(run)
        speedup = "-" if ratio is None else f"{ratio:.2f}x" + (" thr" if by == "throughput" else "")
        cost = run.get("cost") or {}
        records.append(
            {
                "id": run["id"],
                "name": " ".join((run.get("name") or "").split()),
                "state": run.get("state"),
                "num_workers": run.get("num_workers"),
                "algorithm": algorithm_text(run),
                "implementation": implementation_text(run),
                "dataset": s.get("dataset") or run.get("dataset_used") or None,
                "target": goal,
                "target_value": goal_value,
                "time_to_target": ttt,
                "accuracy_after_time": s.get("final_val_accuracy"),
                "accuracy_at": s.get("elapsed"),
                "evaluation": graded.get("status"),
                "throughput": rate,
                "throughput_unit": unit,
                "speedup": ratio,
                "speedup_from": by or None,
                "speedup_against": None if base is None else base["id"],
                "cross_implementation": bool(across),
                "comm_share": s.get("comm_share"),
                "comm_bytes_per_step": s.get("comm_bytes_per_step"),
                "compression_ratio": s.get("compression_ratio"),
                "comm_bytes_to_target": s.get("comm_bytes_to_target"),
                "cost": cost or None,
                "run": run,
                "text": {
                    "dataset": s.get("dataset") or run.get("dataset_used") or _requested(run),
                    "target": _target_text(run, goal, goal_value),
                    "target brief": _target_text(run, goal, goal_value, named=False),
                    "time to target": reached,
                    "after time": after,
                    "speed-up": speedup + across,
                    # The note under the table says against what: "1.80x x-impl".
                    "speed-up brief": speedup + (" x-impl" if across else ""),
                    "sent": volume(s),
                    "sent to target": volume_to_target(s),
                },
            }
        )
    return records, notes, _mixed_warning(runs)


def _target_text(run: dict, goal: str | None, value: float | None, named: bool = True) -> str:
    """ "standard (80.0%)", or without the goal's name (`named`) "80.0%"; a goal of another
    metric than accuracy (task 3's perplexity) is said as that metric: "standard
    (perplexity 70)"."""
    if value is None:
        return goal or "-"
    info = catalogue.TASKS.get(run.get("task") or "")
    metric = info.goals[goal].metric if info and goal in info.goals else "val_accuracy"
    if metric == "val_accuracy":
        shown = percent(value)
    else:
        shown = f"{metric.removeprefix('val_')} {value:g}"
    return f"{goal} ({shown})" if goal and named else shown


def volume(summary: dict) -> str:
    """Bytes a rank sent per step and, in brackets, how many times less than a full fp32
    all-reduce of the same model: "1.1 MB (1.0x)"; "-" before the worker says."""
    sent = summary.get("comm_bytes_per_step")
    if sent is None:
        return "-"
    ratio = summary.get("compression_ratio")
    return f"{size(float(sent))}" + (f" ({float(ratio):.1f}x)" if ratio else "")


def volume_to_target(summary: dict) -> str:
    """Bytes a rank sent until the evaluation that reached the target, as the trainer
    counted them: "40.2 MB"; "not reached"; "-" when the worker did not say (still running,
    or a worker from before they were counted)."""
    if "comm_bytes_to_target" not in summary:
        return "-"
    sent = summary["comm_bytes_to_target"]
    return "not reached" if sent is None else size(float(sent))


def sent_line(summary: dict) -> str:
    """`mlbench show`'s line: "1.1 MB a step (1.0x), 40.2 MB to the target"; "" before the
    worker says."""
    sent = summary.get("comm_bytes_per_step")
    if sent is None:
        return ""
    ratio = summary.get("compression_ratio")
    line = f"{size(float(sent))} a step" + (f" ({float(ratio):.1f}x)" if ratio else "")
    to_target = volume_to_target(summary)
    if to_target == "not reached":
        return line + ", target not reached"
    return line if to_target == "-" else f"{line}, {to_target} to the target"


def _resumed_note(run: dict) -> str:
    """A resumed run's numbers include its parent's training: said under the table."""
    point = (run.get("manifest") or {}).get("resumed_from") or {}
    epoch = f" at epoch {point['epoch']}" if "epoch" in point else ""
    return (
        f"run {run['id']} was resumed from run {run['resumed_from']}'s checkpoint{epoch}: its "
        f"times count the whole training on the benchmark clock, run {run['resumed_from']}'s "
        "part included"
    )


def _summary_from_series(master: Master, run: dict) -> dict[str, Any]:
    """What the metric series say about a run that has no summary (still running, failed
    or cancelled): the newest validation accuracy and when it was measured on the benchmark
    clock (the point's `elapsed` as the master stores and serves it; only from a master that
    serves none, its date mapped through the `elapsed` series), the time to target if the
    worker posted one, and the mean throughput (as the dashboard's compare page takes it)."""
    try:
        body = master.json(
            "get_run_metrics", run["id"], metric_filter=REPORT_METRICS, summarize=2000
        )
    except CliError:
        return {}
    if not isinstance(body, dict):
        return {}
    derived: dict[str, Any] = {}
    ttt = body.get(TIME_TO_TARGET) or []
    if ttt:
        derived["time_to_target"] = float(ttt[-1]["value"])
    acc = body.get(VAL_ACCURACY) or []
    if acc:
        derived["final_val_accuracy"] = float(acc[-1]["value"])
        at = point_time(acc[-1], body.get(ELAPSED) or [])
        if at is not None:
            derived["elapsed"] = at
    metric, _ = throughput_of(run, lambda m: bool(body.get(m)))
    rates = [float(p["value"]) for p in body.get(metric) or [] if p.get("value") is not None]
    if metric and rates:
        derived[metric] = sum(rates) / len(rates)
    return derived


def dataset_of(run: dict) -> str | None:
    """The data set a run actually used (reported), else the one requested; None while
    that is unknown ("auto" requested and nothing reported yet)."""
    s = run.get("summary") or {}
    used = run.get("dataset_used") or s.get("dataset") or run.get("dataset")
    return used if used and used != "auto" else None


def _requested(run: dict) -> str:
    return f"{run['dataset']} (requested)" if run.get("dataset") else "-"


def _cpus(run: dict) -> float | None:
    cpus = run.get("num_cpus")
    return None if cpus is None else float(cpus)


def algorithm_of(run: dict) -> str | None:
    """A run's algorithm with its options, in one canonical text (options in key order);
    None for a run from a master that did not record one."""
    if "algorithm" not in run:
        return None
    options = run.get("algorithm_options") or {}
    return f"{run['algorithm'] or ''} {json.dumps(options, sort_keys=True)}"


# What must be equal for two runs to be compared, and how each is read from a run.
_SETUP: list[tuple[str, Any]] = [
    ("dataset", dataset_of),
    ("task", lambda r: r.get("task") or (r.get("summary") or {}).get("task")),
    ("target", lambda r: r.get("target") or (r.get("summary") or {}).get("target")),
    ("backend", lambda r: r.get("backend") or (r.get("summary") or {}).get("backend")),
    ("CPUs per worker", _cpus),
    ("device", lambda r: "gpu" if r.get("gpu_enabled") else "cpu"),
    ("command", lambda r: (r.get("custom_image_command") or "").strip()),
    ("algorithm", algorithm_of),
    ("implementation", implementation_of),
    ("learning-rate schedule", lambda r: r.get("lr_schedule") or ""),
    ("test set", lambda r: r.get("test_examples") or ""),  # null: the whole test set
    ("training set", lambda r: r.get("train_examples") or ""),  # null: the whole one
    ("batch size", lambda r: r.get("batch_size") or ""),  # null: the task's
]


def setup_differences(a: dict, b: dict) -> list[str]:
    """The set-up fields in which runs `a` and `b` differ; [] means they may be compared.

    Why: a speed-up only means something between runs that differ in the number of
    workers and nothing else. A synthetic-data run against a CIFAR-10 run, or runs of
    different tasks, targets, backends, CPUs per worker, algorithms (with their options),
    implementations (frameworks), learning-rate schedules or test sets give a ratio that measures the
    difference in set-up, not scaling, and a synthetic result must never pass for a
    CIFAR-10 one. An unknown data set therefore differs from everything. The dashboard's
    compare page keeps the same rule in static/dashboard/js/comparable.js.
    """
    differ = []
    for name, of in _SETUP:
        x, y = of(a), of(b)
        if x != y or (name == "dataset" and x is None):
            differ.append(name)
    return differ


def baseline(
    run: dict, runs: list[dict], across_implementations: bool = False
) -> tuple[dict | None, str]:
    """The 1-worker run among `runs` to compare `run` with, else (None, why not).

    With `across_implementations` (the user asked for the cross-implementation ratio), a
    run without a 1-worker run of its own implementation is compared with one that differs
    in the implementation and at most the backend (what an implementation brings: torch-ddp
    runs on gloo or nccl, tensorflow on its own collectives, the reference loop defaults to
    mpi): the same backend first, then the reference loop's, then the first listed."""
    if run.get("num_workers") == 1:
        return run, ""
    ones = [r for r in runs if r.get("num_workers") == 1]
    if not ones:
        return None, "no 1-worker run listed"
    diffs = [(setup_differences(run, r), r) for r in ones]
    for differ, other in diffs:
        if not differ:
            return other, ""
    if across_implementations:
        others = [
            (len(differ), implementation_of(r) != "reference", r)
            for differ, r in diffs
            if "implementation" in differ and set(differ) <= {"implementation", "backend"}
        ]
        if others:
            return min(others, key=lambda o: o[:2])[2], ""
    if dataset_of(run) is None:
        return None, "data set not reported yet"
    nearest = min((d for d, _ in diffs), key=len)
    return None, f"no 1-worker run listed with the same {'/'.join(nearest)}"


def _mixed_warning(runs: list[dict]) -> str:
    """A warning when the runs used different data sets or ran different tasks."""
    sets = sorted({dataset_of(r) or "not reported yet" for r in runs})
    tasks = sorted({r.get("task") or "-" for r in runs})
    parts = []
    if len(sets) > 1:
        parts.append(f"different data sets ({', '.join(sets)})")
    if len(tasks) > 1:
        parts.append(f"different tasks ({', '.join(tasks)})")
    if not parts:
        return ""
    text = f"warning: these runs use {' and '.join(parts)}: their results are not comparable."
    if "synthetic" in sets:
        real = sorted(
            {
                info.dataset
                for r in runs
                if dataset_of(r) == "synthetic"
                and (info := catalogue.TASKS.get(r.get("task") or "")) is not None
            }
        )
        named = " or ".join(real) or "the task's real data set"
        text += f" Synthetic results say nothing about accuracy on {named}."
    return text + " Speed-up only against a 1-worker run of the same set-up."


def _across_hint(why: str) -> str:
    """How to ask for the ratio that the implementation alone kept from being given."""
    if why.endswith((" the same implementation", " the same backend/implementation")):
        return " (--across-implementations gives the cross-implementation ratio)"
    return ""


def _speedup(run: dict, base: dict) -> tuple[float | None, str, str]:
    """(ratio, what it was taken from, the cross-implementation label): the time to target
    of `base` over that of `run` ("time_to_target"), else the ratio of their throughputs
    counted in the same unit ("throughput", shown "thr"), else (None, "", ""). A ratio
    against a run of another implementation says so: " vs reference (cross-implementation)"."""
    if base is run:
        return 1.0, "time_to_target", ""
    s, b = run.get("summary") or {}, base.get("summary") or {}
    across = ""
    if implementation_of(base) != implementation_of(run):
        across = f" vs {implementation_of(base)} (cross-implementation)"
    mine_ttt, base_ttt = time_to_target(run), time_to_target(base)
    if mine_ttt and base_ttt:
        return float(base_ttt) / float(mine_ttt), "time_to_target", across
    (mine, unit), (theirs, base_unit) = _throughput(run, s), _throughput(base, b)
    if mine and theirs and unit == base_unit:
        return mine / theirs, "throughput", across
    return None, "", ""
