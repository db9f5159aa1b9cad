"""Every metric point a run or a worker slot records, declared once: its name, unit, meaning,
who records it, and which of the benchmark's goals it serves.

Why one declaration: the trainers posted names spelled by hand in four implementations, the
master's results, the dashboard's scripts and the CLI spelled them again, and docs/metrics.rst
listed them a third way, so a renamed or misspelled point went unnoticed until a chart stayed
empty. Now the reporter (mlbench_worker/training/metric_sink.py) refuses a name not declared
here, the master's readers take names from here, the dashboard gets the declarations served as
data (`served()`, embedded by its base template), and docs/metrics.rst's table of names is
generated from them (`python -m mlbench_worker.shared.metric_points --rst` rewrites it;
tests/worker/test_metric_points.py fails when the page and the declarations differ).

The benchmark clock is one fact: the metadata key `elapsed` (CLOCK) of a point is the
benchmark-clock second it was measured at, stored with the point and returned with it by every
read of GET /api/metrics/ (summarized reads included: a bucket carries its last point's).
`benchmark_time` is the one reading of it.

Plain data and the standard library only: the master, the client and the ranks import it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# What a point is for: the benchmark's questions (docs/index.rst), in the order the docs list them.
GOALS: dict[str, str] = {
    "target": "the task's goal metric: accuracy after time, and what time to accuracy waits for",
    "clock": "where a run is: the benchmark clock and epochs (time to accuracy is read on it)",
    "training": "the training curve, to see how a run learns",
    "throughput": "training speed, the task's throughput unit",
    "time split": "where a step's time goes: data, compute, communication",
    "communication": "what the ranks exchange: bytes and the backend's bandwidth",
    "resources": "what a worker slot uses: CPU, memory, network",
    "resume": "what a later run may continue from",
}
RUN, POD = "run", "pod"  # who a point belongs to
RANK0, EVALUATOR, COLLECTOR = "rank 0", "the master's evaluator", "the master's collector"
CLOCK = "elapsed"  # the metadata key of a point's benchmark-clock second (and a metric's name)


@dataclass(frozen=True)
class MetricPoint:
    name: str
    unit: str
    meaning: str
    goal: str  # a key of GOALS
    by: str = RANK0  # who records it
    owner: str = RUN  # RUN or POD


class UnknownMetric(ValueError):
    """A name no declaration has: a misspelling, or a point nobody declared."""


def _p(name: str, unit: str, goal: str, meaning: str, **who: str) -> MetricPoint:
    return MetricPoint(name, unit, meaning, goal, **who)


_EVERY_REPORT = "every --log-every steps, at least every 15 s, and at each epoch's end"
_RANK = "one rank's {}, metadata adds rank (only with more than one rank)"

POINTS: tuple[MetricPoint, ...] = (
    _p("val_accuracy", "fraction", "target", "top-1 accuracy on the whole test set (0..1), after every epoch and the final evaluation"),  # noqa: E501
    _p("val_perplexity", "-", "target", "task 3: validation perplexity (its goal's metric: lower is better); same times as val_accuracy"),  # noqa: E501
    _p("val_bleu", "BLEU", "target", "task 4b: the run's own corpus BLEU (sacrebleu, 0..100) of its greedy-decoded test set (its goal's metric: higher is better); same times as val_accuracy"),  # noqa: E501
    _p("val_top5_accuracy", "fraction", "target", "task 1b: top-5 accuracy on the whole test set; same times as val_accuracy"),  # noqa: E501
    _p("evaluated_val_accuracy", "fraction", "target", "the evaluator's grade of the run's predictions of one evaluation (metadata: step, epoch, elapsed of that evaluation, examples, dataset)", by=EVALUATOR),  # noqa: E501
    _p("evaluated_val_perplexity", "-", "target", "task 3: the evaluator's perplexity of one evaluation's predictions", by=EVALUATOR),  # noqa: E501
    _p("evaluated_val_bleu", "BLEU", "target", "task 4b: the evaluator's corpus BLEU (sacrebleu, 0..100) of one evaluation's hypotheses (metadata as evaluated_val_accuracy's, and sacrebleu's signature)", by=EVALUATOR),  # noqa: E501
    _p("evaluated_val_top5_accuracy", "fraction", "target", "task 1b: the evaluator's top-5 grade of one evaluation's predictions", by=EVALUATOR),  # noqa: E501
    _p("time_to_target", "s", "clock", "benchmark-clock seconds when the goal metric first reached the target; once, only if it was reached"),  # noqa: E501
    _p(CLOCK, "s", "clock", "seconds on the benchmark clock (from the first training step, evaluation included); with every training report and evaluation"),  # noqa: E501
    _p("epoch", "epochs", "clock", "epochs done, fractional during an epoch; with every training report and evaluation"),  # noqa: E501
    _p("train_loss", "nats", "training", f"mean training loss over all ranks' examples since the last report (task 2: logistic loss or half the squared error, without the L2 penalty); {_EVERY_REPORT}"),  # noqa: E501
    _p("train_accuracy", "fraction", "training", "share of those examples predicted correctly (0..1); same times"),  # noqa: E501
    _p("learning_rate", "1", "training", "the rate of the last step; same times"),
    _p("val_loss", "nats", "training", "mean loss on the whole test set; same times as val_accuracy"),  # noqa: E501
    _p("averaging_started", "steps", "training", "task 3a: the step at which averaged SGD began (metadata: step, elapsed); once"),  # noqa: E501
    _p("images_per_sec", "images/s", "throughput", "training images of all ranks per wall-clock second over the report interval (tasks 1a, 1b)"),  # noqa: E501
    _p("samples_per_sec", "samples/s", "throughput", "training rows of all ranks per wall-clock second over the report interval (task 2)"),  # noqa: E501
    _p("tokens_per_sec", "tokens/s", "throughput", "training tokens of all ranks per wall-clock second over the report interval (task 3)"),  # noqa: E501
    _p("time_data", "s/step", "time split", "mean time per step getting the batch ready (gather, augment, to device), averaged over ranks; same times as train_loss"),  # noqa: E501
    _p("time_compute", "s/step", "time split", "mean time per step in forward, backward and the optimizer step, averaged over ranks; same times"),  # noqa: E501
    _p("time_comm", "s/step", "time split", "mean exposed communication per step (the wait after backward, slower ranks included), averaged over ranks; same times"),  # noqa: E501
    _p("time_comm_total", "s/step", "time split", "mean time per step during which a gradient bucket was in flight, hidden or not; same times"),  # noqa: E501
    _p("rank_time_data", "s/step", "time split", _RANK.format("time_data")),
    _p("rank_time_compute", "s/step", "time split", _RANK.format("time_compute")),
    _p("rank_time_comm", "s/step", "time split", _RANK.format("time_comm")),
    _p("rank_time_comm_total", "s/step", "time split", _RANK.format("time_comm_total")),
    _p("comm_bytes", "bytes/step", "communication", "bytes one rank sent per step, the mean over ranks; same times as train_loss"),  # noqa: E501
    _p("claimed_comm_bytes", "bytes/step", "communication", "an outside algorithm's own claim of its bytes per step (its claimed_bytes), the mean over ranks, posted beside comm_bytes (the trainer's measured count, which results use) and never instead of it; same times, only when the algorithm claims"),  # noqa: E501
    _p("latency_us", "µs", "communication", "backend benchmark: a collective's median time, one point per operation, backend and size (metadata: op, backend, size, workers, repeats, warmup, capped, best, elapsed)"),  # noqa: E501
    _p("busbw_mbps", "Mbit/s", "communication", "backend benchmark: median bus bandwidth of the cell; same points"),  # noqa: E501
    _p("algbw_mbps", "Mbit/s", "communication", "backend benchmark: median algorithm bandwidth of the cell; same points"),  # noqa: E501
    _p("checkpoint", "epochs", "resume", "epochs completed when rank 0 wrote a checkpoint (metadata adds identity); the master reads it to accept resume_from"),  # noqa: E501
    _p("cpu_cores", "cores", "resources", "CPU a worker slot used, in cores, sampled periodically", by=COLLECTOR, owner=POD),  # noqa: E501
    _p("memory_bytes", "bytes", "resources", "memory a worker slot used", by=COLLECTOR, owner=POD),  # noqa: E501
    _p("net_rx_bytes", "bytes", "resources", "bytes a worker slot received, cumulative", by=COLLECTOR, owner=POD),  # noqa: E501
    _p("net_tx_bytes", "bytes", "resources", "bytes a worker slot sent, cumulative", by=COLLECTOR, owner=POD),  # noqa: E501
)  # fmt: skip
BY_NAME: dict[str, MetricPoint] = {p.name: p for p in POINTS}
NAMES = frozenset(BY_NAME)


def declared(name: str) -> str:
    """`name` itself when a point of that name is declared; UnknownMetric otherwise, naming
    the nearest declared names, so a misspelled emit or read fails where it is written."""
    if name not in BY_NAME:
        near = sorted(NAMES, key=lambda n: _distance(n, name))[:3]
        raise UnknownMetric(f"{name!r} is not a declared metric point (nearest: {', '.join(near)})")
    return name


def of_goal(goal: str, owner: str = RUN) -> tuple[str, ...]:
    """The names serving `goal`, in declaration order."""
    if goal not in GOALS:
        raise KeyError(f"{goal!r} is not a goal: {', '.join(GOALS)}")
    return tuple(p.name for p in POINTS if p.goal == goal and p.owner == owner)


def benchmark_time(metadata: Mapping[str, Any] | None) -> float | None:
    """A point's benchmark-clock second, as stored with it (metadata CLOCK); None when the
    point was not placed on the clock (a pod's reading, an old or hand-made point)."""
    if not isinstance(metadata, Mapping):
        return None
    value = metadata.get(CLOCK)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# The names the code refers to, each checked against the declarations when imported.
VAL_ACCURACY = declared("val_accuracy")
TIME_TO_TARGET = declared("time_to_target")
EPOCH = declared("epoch")
ELAPSED = declared(CLOCK)
TRAIN_LOSS, TRAIN_ACCURACY = declared("train_loss"), declared("train_accuracy")
LEARNING_RATE, VAL_LOSS = declared("learning_rate"), declared("val_loss")
TIMINGS = tuple(declared(f"time_{n}") for n in ("data", "compute", "comm", "comm_total"))
RANK_TIMINGS = tuple(declared(f"rank_{n}") for n in TIMINGS)
COMM_BYTES = declared("comm_bytes")
CHECKPOINT = declared("checkpoint")


def served() -> dict[str, Any]:
    """The declarations as the dashboard's scripts read them (static/dashboard/js/metric_points.js):
    {clock, goals, points: {name: {unit, meaning, goal, by, owner}}}."""
    return {
        "clock": CLOCK,
        "goals": dict(GOALS),
        "points": {p.name: {k: v for k, v in asdict(p).items() if k != "name"} for p in POINTS},
    }


# --- docs/metrics.rst ------------------------------------------------------------------------
DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.rst"
BEGIN = ".. metric-points: generated by python -m mlbench_worker.shared.metric_points --rst"
END = ".. metric-points: end"


def rst() -> str:
    """The table of metric points docs/metrics.rst holds, between BEGIN and END."""
    lines = [BEGIN, "", ".. list-table::", "   :header-rows: 1", "   :widths: 22 10 12 56", ""]
    lines += ["   * - name", "     - unit", "     - goal", "     - meaning (recorded by)"]
    for p in POINTS:
        owner = "" if p.owner == RUN else f", per {p.owner}"
        lines += [
            f"   * - ``{p.name}``",
            f"     - {p.unit}",
            f"     - {p.goal}",
            f"     - {p.meaning} ({p.by}{owner})",
        ]
    lines += ["", "Goals:", ""]
    lines += [f"- *{goal}*: {meaning}" for goal, meaning in GOALS.items()]
    return "\n".join([*lines, "", END])


def rewritten(text: str) -> str:
    """`text` (the page) with its generated section replaced by `rst()`."""
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"the page lacks the lines {BEGIN!r} ... {END!r}")
    return head + rst() + rest.partition(END)[2]


def _distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def main(argv: list[str] | None = None) -> int:
    """--rst: rewrite docs/metrics.rst's table (or print it with --print)."""
    parser = argparse.ArgumentParser(prog="python -m mlbench_worker.shared.metric_points")
    parser.add_argument("--rst", action="store_true", help="rewrite docs/metrics.rst's table")
    parser.add_argument("--print", action="store_true", help="print the table instead")
    args = parser.parse_args(argv)
    if args.print:
        print(rst())
    elif args.rst:
        DOC.write_text(rewritten(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
