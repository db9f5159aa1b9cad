"""What the master stored about a run, read once for the statistics, the MLPerf logs and
the plots: the worker's summary where it posted one, its metric points otherwise.

Why both: the summary is the published result of a run that finished, but a run that
failed or was cancelled never posts one, and its metric points are all there is. Each
value is read from the same points the dashboard and the API show (`val_accuracy` with the
benchmark clock in its metadata, `time_to_target` posted when the goal was reached, the
throughput metric of the task, the `time_*` timings), so a reader can redo any number from
`GET /api/metrics/<run>/`.

Who graded the accuracy: where the evaluator graded a run's predictions
(`evaluated_<goal metric>` points, api/predictions.py: `evaluated_val_accuracy`, a
translation task's `evaluated_val_bleu`), its grades are the run's accuracy,
its time to target and its accuracy after time; what the run reported itself is kept
beside them and only compared (`mismatches`, TOLERANCE). A run with no grade is
"self-reported, not evaluated" and its own numbers are used, labelled so wherever shown
(docs/checking.rst, "Who grades a run").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlbench_master.api.models import Run
from mlbench_master.grading import model_files
from mlbench_master.results import cost, point_reads
from mlbench_master.results.run_result import RunResult
from mlbench_worker.shared import catalogue, metric_points, result
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.shared.evaluation.model_audit import NO_MODEL

# The names are the declarations' (mlbench_worker/shared/metric_points.py).
TIMINGS = metric_points.TIMINGS[:3]  # data, compute, exposed communication (the split)
SPLIT_NAMES = dict(zip(TIMINGS, ("data", "compute", "communication"), strict=True))
REPORTED = metric_points.VAL_ACCURACY  # what a run says of itself (of an accuracy task)
TIME_TO_TARGET = metric_points.TIME_TO_TARGET
GRADED = graded_name(REPORTED)  # what the evaluator said of an accuracy task's predictions
# Every metric some task's goals are of (val_accuracy; task 3's val_perplexity, reached from
# above): a run's own word is read from its task's (`goal_metric`).
GOAL_METRICS = tuple(
    dict.fromkeys(
        metric_points.declared(m)
        for m in [REPORTED, *(g.metric for t in catalogue.TASKS.values() for g in t.goals.values())]
    )
)


# Every name the evaluator's grade of some task's goal metric is stored under.
GRADED_NAMES = tuple(dict.fromkeys(graded_name(m) for m in GOAL_METRICS))


def goal_metric(run: Run) -> str:
    """The metric a run's result is of: its task's goal's (the same for all goals of a
    task), val_accuracy for a task this version does not know."""
    info = catalogue.TASKS.get(run.task)
    goal = (info.goals.get(run.target) or next(iter(info.goals.values()), None)) if info else None
    return goal.metric if goal else REPORTED


# How far a run's own accuracy may stray from the evaluator's grade of the same evaluation
# before the run is marked (absolute, accuracy in 0..1: half a percentage point). Both
# count the same examples, so an honest run differs by rounding at most; the margin
# leaves room for a framework's float32 accumulation, not for a different test set.
TOLERANCE = 0.005
# The same margin for the goal metrics on other scales: BLEU (0..100) is computed by the run
# and the evaluator with the same pinned sacrebleu on the same lines, so an honest run
# differs by float rounding; 0.05 lets a run that rounds to two decimals pass.
TOLERANCES = {"val_bleu": 0.05}


def tolerance_of(metric: str) -> float:
    """How far a run's own `metric` may stray from the evaluator's grade."""
    return TOLERANCES.get(metric, TOLERANCE)


# The worker records an evaluation's benchmark clock to the millisecond, and its time to
# target as the same number (training/progress.py, record_evaluation); a run stored before
# that kept the unrounded reading, up to half of this away from its evaluation's clock.
CLOCK_RESOLUTION = 0.001
EVALUATED, SELF_REPORTED = "evaluated", "self-reported, not evaluated"


@dataclass
class Evaluation:
    """One validation the worker reported: when (benchmark clock), where in training."""

    seconds: float
    accuracy: float
    epoch: float | None
    step: int | None


@dataclass
class StoredRun:
    """A run with the metric points the results need, grouped by name."""

    run: Run
    points: dict[str, list[tuple[float, dict]]] = field(default_factory=dict)
    split_means: dict[str, float] | None = None  # the timings', where `load` had them made

    @property
    def summary(self) -> dict:
        return self.run.summary or {}

    def throughput_metric(self) -> tuple[str | None, str]:
        return catalogue.throughput_of(
            self.run.task,
            lambda m: result.read(self.summary, m) is not None,
            lambda m: m in self.points,
        )

    @property
    def graded(self) -> str:
        """The name the evaluator's grades of this run are stored under."""
        return graded_name(self.reported)

    @property
    def evaluated(self) -> bool:
        """Whether the evaluator graded this run (at least one evaluation)."""
        return bool(self.points.get(self.graded))

    @property
    def reported(self) -> str:
        """The metric of the run's own word: its goal's (`goal_metric`)."""
        return goal_metric(self.run)

    def evaluation_status(self) -> str:
        """EVALUATED, SELF_REPORTED, or "" for a run that has no accuracy at all yet."""
        if self.evaluated:
            return EVALUATED
        return SELF_REPORTED if self.points.get(self.reported) else ""

    def evaluations(self) -> list[Evaluation]:
        """The run's accuracies (or its goal's other metric, task 3's perplexity) on the
        benchmark clock: the evaluator's where it graded."""
        return self._evaluations(self.graded if self.evaluated else self.reported)

    def reported_evaluations(self) -> list[Evaluation]:
        return self._evaluations(self.reported)

    def mismatches(self) -> list[dict[str, Any]]:
        """The evaluations where the run's own accuracy and the evaluator's grade of the same
        step differ by more than the metric's tolerance: both numbers, for the run's mark."""
        reported = {e.step: e.accuracy for e in self.reported_evaluations() if e.step is not None}
        out = []
        margin = tolerance_of(self.reported)
        for graded in self._evaluations(self.graded):
            said = reported.get(graded.step)
            if said is not None and abs(said - graded.accuracy) > margin:
                out.append({"step": graded.step, "reported": said, "graded": graded.accuracy})
        return out

    def _evaluations(self, name: str) -> list[Evaluation]:
        out = []
        for value, meta in self.points.get(name, []):
            # The benchmark time stored with the point, as every metric read serves it.
            seconds = metric_points.benchmark_time(meta)
            if seconds is None:
                continue  # not placed on the benchmark clock: cannot be drawn or logged
            step = meta.get("step")
            out.append(
                Evaluation(
                    seconds,
                    float(value),
                    meta.get("epoch"),
                    int(step) if step is not None else None,
                )
            )
        return out

    def reaching_evaluation(self) -> Evaluation | None:
        """The evaluation at which the goal was reached: the first graded one that meets
        the goal where the evaluator graded the run (whatever the run said of itself);
        else the one whose clock is the time to target the run reported, to the
        millisecond an evaluation's clock is recorded in (CLOCK_RESOLUTION). None when
        not reached, or when the run's word names no evaluation it reported."""
        evals = self.evaluations()
        if self.evaluated:
            goal = _goal(self.run)
            return next((e for e in evals if goal.reached(e.accuracy)), None) if goal else None
        said = self._reported_time_to_target()
        if said is None:
            return None
        near = CLOCK_RESOLUTION / 2 + 1e-9
        return next((e for e in evals if abs(e.seconds - said) <= near), None)

    def time_to_target(self) -> float | None:
        """When the goal was reached: the clock of `reaching_evaluation` (the same number
        the MLPerf log stops at); a run's own word that names none of its evaluations is
        kept as it said it (an ungraded run that posted no evaluation clock)."""
        reached = self.reaching_evaluation()
        if reached is not None:
            return reached.seconds
        return None if self.evaluated else self._reported_time_to_target()

    def _reported_time_to_target(self) -> float | None:
        if self.summary:
            ttt = result.read(self.summary, "time_to_target")
            return float(ttt) if ttt is not None else None
        posted = self.points.get(TIME_TO_TARGET) or []
        return float(posted[0][0]) if posted else None

    def accuracy_after_time(self) -> float | None:
        if self.evaluated:
            graded = self.evaluations()
            return graded[-1].accuracy if graded else None
        final = result.read(self.summary, f"final_{self.reported}")
        if final is not None:
            return float(final)
        evals = self.evaluations()
        return evals[-1].accuracy if evals else None

    def throughput(self) -> float | None:
        metric, _ = self.throughput_metric()
        if metric is None:
            return None
        reported = result.read(self.summary, metric)
        if reported is not None:
            return float(reported)
        values = [v for v, _ in self.points.get(metric, [])]
        return statistics.fmean(values) if values else None

    def time_split(self) -> dict[str, float]:
        """Seconds per step in data loading, compute and exposed communication: the
        reported interval means (over ranks) weighted by the steps of each interval."""
        if (made := self.split_means) is not None:
            return {SPLIT_NAMES[n]: made[n] for n in TIMINGS if n in made}
        sums: dict[str, float] = {}
        for name in TIMINGS:
            total = steps = 0.0
            previous = 0
            for value, meta in self.points.get(name, []):
                step = int(meta.get("step") or 0)
                weight = max(step - previous, 1)
                previous = step
                total += value * weight
                steps += weight
            if steps:
                sums[SPLIT_NAMES[name]] = total / steps
        return sums

    def communication_share(self) -> float | None:
        share = result.read(self.summary, "comm_share")
        if share is not None:
            return float(share)
        split = self.time_split()
        whole = sum(split.values())
        return split["communication"] / whole if whole > 0 and "communication" in split else None

    def result(self) -> RunResult:
        rate = cost.rate_of(self.run)
        return RunResult(
            run=self.run.pk,
            seed=self.run.seed,
            num_workers=self.run.num_workers,
            state=self.run.state,
            time_to_target=self.time_to_target(),
            accuracy_after_time=self.accuracy_after_time(),
            throughput=self.throughput(),
            communication_share=self.communication_share(),
            curve=tuple((e.seconds, e.accuracy) for e in self.evaluations()),
            time_split=self.time_split(),
            evaluation=self.evaluation_status(),
            mismatches=len(self.mismatches()),
            price_per_hour=rate.per_hour,
            currency=rate.currency,
            not_priced=rate.reason,
            run_seconds=cost.run_seconds(self.run),
        )


# Every throughput metric some task posts (images_per_sec, samples_per_sec, ...).
THROUGHPUT_METRICS = tuple(dict.fromkeys(t.throughput_metric for t in catalogue.TASKS.values()))
NEEDED = (*GOAL_METRICS, *GRADED_NAMES, TIME_TO_TARGET, *TIMINGS, *THROUGHPUT_METRICS)
# What a run's grading and time to target need (its accuracies as reported and as graded,
# its posted time to target): a reader of only these need not read its training curve.
GRADING = (*GOAL_METRICS, *GRADED_NAMES, TIME_TO_TARGET)


def graded_run(run: Run, memo: dict[str, Any], listed: Iterable[Run] = ()) -> StoredRun:
    """`run` with the points its grading and its time to target need (its accuracies as
    reported and as graded, its posted time to target). They are read for `run` and the
    other runs `listed` beside it in one query, kept in `memo` (a serializer's context:
    once per response, not per run; a list of series asks again for each series' runs)."""
    known = memo.setdefault("evaluations", {})
    if run.pk not in known:
        ids = {run.pk, *(r.pk for r in listed)} - known.keys()
        known.update({i: {} for i in ids} | _points_of(ids, GRADING))
    return StoredRun(run, known[run.pk])


def evaluation_of(run: Run, memo: dict[str, Any], listed: Iterable[Run] = ()) -> dict[str, Any]:
    """Who graded `run` and where it disagrees with itself, as the API shows it (its points
    read as `graded_run` reads them)."""
    found = graded_run(run, memo, listed)
    record: dict[str, Any] = {
        "status": found.evaluation_status(),
        "grades": len(found.points.get(found.graded, [])),
        "tolerance": tolerance_of(found.reported),
        "mismatches": found.mismatches(),
        # The ONNX audit of the run's final model (model_auditing.py), or "no model".
        "audit": model_files.audit_of(run.pk) or {"status": NO_MODEL},
    }
    record["metric"] = found.reported  # what the grades and mismatches are of
    graded = found.points.get(found.graded) or []
    if graded and graded[-1][1].get("signature"):  # which BLEU (sacrebleu's signature)
        record["signature"] = graded[-1][1]["signature"]
    if found.evaluated:  # the run's result by its grades, for clients that compare runs
        last = found.evaluations()
        record["time_to_target"] = found.time_to_target()
        record["accuracy_after_time"] = found.accuracy_after_time()
        record["elapsed"] = last[-1].seconds if last else None
    return record


def _goal(run: Run) -> catalogue.Goal | None:
    info = catalogue.TASKS.get(run.task)
    return info.goals.get(run.target) if info else None


def load(runs: Iterable[Run], names: Iterable[str] = NEEDED) -> list[StoredRun]:
    """The runs with their needed metric points (`names`: GRADING for a reader of the
    grades only), in one query for all of them; a whole result's (NEEDED) on PostgreSQL
    with its timings' means and throughput values made there (point_reads.py)."""
    runs, names = list(runs), tuple(names)
    ids = {r.pk for r in runs}
    if not ids:
        return []
    if names != NEEDED or not point_reads.available():
        grouped = _points_of(ids, names)
        return [StoredRun(r, grouped.get(r.pk, {})) for r in runs]
    grouped = _points_of(ids, [n for n in names if n not in (*TIMINGS, *THROUGHPUT_METRICS)])
    for run_id, by_name in point_reads.values(ids, THROUGHPUT_METRICS).items():
        grouped.setdefault(run_id, {}).update(by_name)
    means = point_reads.weighted_means(ids, TIMINGS)
    return [StoredRun(r, grouped.get(r.pk, {}), means.get(r.pk, {})) for r in runs]


_points_of = point_reads.points_of


def on_grades(found: StoredRun, here: dict[int, dict[str, float]]) -> list[tuple[float, dict]]:
    """`found`'s grade points with this master's grades (`here`: step -> name -> value, an
    agreeing re-grade's, standing.py) in place of its origin's, each step once: a grade
    this master did not make (no file of its step) is left out, the origin's clock kept."""
    mine, seen, name = [], set(), found.graded
    for _, meta in found.points.get(name, []):
        step = meta.get("step")
        if step in seen or name not in here.get(step, {}):
            continue  # a grade this master did not make (no file of its step), or again
        seen.add(step)
        mine.append((here[step][name], meta))
    return mine


def target_of(series: Any) -> dict[str, Any]:
    """What the series' runs aim at: the task, the goal and its metric, the data sets used."""
    runs = list(series.runs.all())
    settings = series.settings or {}
    task_name = settings.get("task") or (runs[0].task if runs else catalogue.DEFAULT_TASK)
    goal_name = settings.get("target") or (runs[0].target if runs else "standard")
    return target_for(task_name, goal_name, [r.dataset_used for r in runs if r.dataset_used])


def target_for(task_name: str, goal_name: str, datasets: Iterable[str] = ()) -> dict[str, Any]:
    info = catalogue.TASKS.get(task_name)
    goal = info.goals.get(goal_name) if info else None
    return {
        "task": task_name,
        "goal": goal_name,
        "metric": goal.metric if goal else "val_accuracy",
        "value": goal.value if goal else None,
        "direction": goal.direction if goal else catalogue.UP,
        "throughput_unit": info.throughput_unit if info else catalogue.NEUTRAL_UNIT,
        "datasets": sorted(set(datasets)),
        "synthetic": "synthetic" in set(datasets),
    }
