"""A run's result log in MLPerf Training's format, written by MLCommons' own `mllog`.

Why: a reader checks the result with MLCommons' tools (`python -m
mlperf_logging.compliance_checker`, the result summarizer) instead of trusting ours. The
lines are made by `mlperf_logging.mllog.MLLogger`, never by hand, from what the master
stored: the run's fields, the worker's summary (its `config`) and the metric points with
their benchmark-clock times. Nothing is logged that the run did not record: a
hyperparameter the worker does not report is absent, and a checker that needs it says so.

The timeline (ms since the Unix epoch): init_start when the run started, init_stop and
run_start when the benchmark clock started (a point's date less its `elapsed`), every
evaluation at its clock time, each preceded by the block of epochs trained since the last
one. A run that reached its target stops at the evaluation that reached it (run_stop status
"success", as MLPerf runs stop at convergence): that evaluation is logged, and run_stop is
at its recorded clock, which is the time to target the statistics use, so run_stop -
run_start equals it to the millisecond; any other run stops "aborted" at its last
evaluation (`logged_evaluations`).

Task 1b ResNet-50 is MLPerf's "resnet" benchmark, checked with the package's newest closed
rules for it (MLPERF_RULESET); every other task is checked with our own ruleset file
(mlperf_rules/mlbench.yaml) by the same checker (`checker_command`).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as C  # noqa: N812  (MLPerf's own name)
from mlperf_logging.mllog.mllog import MLLogger

from mlbench_master.api.models import Metric, Run
from mlbench_master.results import stored
from mlbench_master.results.mlperf_rules import OWN_RULES
from mlbench_worker.shared import result

# The newest training ruleset of mlperf-logging 4.1.68 that still has closed ResNet rules.
MLPERF_RULESET = "4.0.0"
ROOT = Path(__file__).resolve().parents[2]  # trimmed from the call sites mllog records
ORG = "mlbench"
STATUS = "research"  # MLPerf's value for results that are no product's submission
# Our tasks that are MLPerf benchmarks, and MLPerf's name for them.
MLPERF_BENCHMARKS = {"resnet50-imagenet": C.RESNET}
TARGET_KEY = "mlbench_target_accuracy"  # our own key: the goal our ruleset checks
# Our own key: whether eval_accuracy must rise to the target ("up") or fall to it ("down":
# task 3's perplexity, logged as eval_accuracy the way MLPerf logs its language models'
# perplexity-based quality).
DIRECTION_KEY = "mlbench_target_direction"

# Hyperparameters of the summary's config, logged under MLPerf's keys when the worker
# reported them (key in config -> MLPerf key).
_SGD_KEYS = {
    "momentum": "sgd_opt_momentum",
    "weight_decay": "sgd_opt_weight_decay",
    "end_lr": "sgd_opt_end_learning_rate",
    "poly_power": "sgd_opt_learning_rate_decay_poly_power",
    "decay_steps": "sgd_opt_learning_rate_decay_steps",
}
_COMMON_KEYS = {
    "warmup_epochs": C.OPT_LR_WARMUP_EPOCHS,
    "decay_epochs": C.OPT_LR_DECAY_BOUNDARY_EPOCHS,
    "decay_factor": C.OPT_LR_DECAY_FACTOR,
    "lr_schedule": C.OPT_LR_DECAY_SCHEDULE,
    "l2": C.OPT_WEIGHT_DECAY,
}


@dataclass
class LogRecord:
    """Plain data for one run's log (built from stored data by `record_of`)."""

    benchmark: str
    division: str
    platform: str
    seed: int
    global_batch_size: int
    per_worker_batch: int
    base_lr: float | None
    train_samples: int | None
    eval_samples: int | None
    target: float | None
    init_ms: float
    clock_ms: float  # when the benchmark clock started
    evaluations: list[stored.Evaluation]  # those logged: up to run_stop (logged_evaluations)
    time_to_target: float | None
    stop_seconds: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    direction: str = "up"  # of the target: catalogue.UP or DOWN


def _clock_start(run: stored.StoredRun) -> dt.datetime | None:
    """When the worker's benchmark clock read 0: a dated point minus its `elapsed`."""
    name = stored.goal_metric(run.run)
    point = Metric.objects.filter(run=run.run, name=name).order_by("date", "id").first()
    if point is None or (point.metadata or {}).get("elapsed") is None:
        return None
    return point.date - dt.timedelta(seconds=float(point.metadata["elapsed"]))


def record_of(run: stored.StoredRun) -> LogRecord:
    r, summary = run.run, run.summary
    config = result.read(summary, "config") or {}
    per_worker = int(result.read_config(summary, "batch_size") or 0)
    started = r.started_at or r.created_at
    clock = _clock_start(run) or started
    clock = max(clock, started)
    evals, ttt, stop = logged_evaluations(run)
    hyper = {k: config[c] for c, k in _COMMON_KEYS.items() if config.get(c) is not None}
    benchmark = MLPERF_BENCHMARKS.get(r.task, r.task)
    if benchmark == C.RESNET:
        hyper.pop(C.OPT_WEIGHT_DECAY, None)
        hyper.update({k: config[c] for c, k in _SGD_KEYS.items() if config.get(c) is not None})
        if config.get("peak_lr") is not None:
            hyper["sgd_opt_base_learning_rate"] = config["peak_lr"]
        hyper["model_bn_span"] = per_worker  # batch norm statistics per worker's batch
    device = "gpu" if r.gpu_enabled else "cpu"
    return LogRecord(
        benchmark=benchmark,
        division=r.division,
        # Workers by device: the folder name MLPerf's result tree uses. (It read a "cpu" entry
        # of the hardware first, which no summary ever had: the record declares none.)
        platform=f"{r.num_workers}x{device}",
        seed=r.seed,
        global_batch_size=per_worker * r.num_workers,
        per_worker_batch=per_worker,
        base_lr=config.get("peak_lr"),
        train_samples=(
            config.get("train_images") or config.get("train_samples") or config.get("train_tokens")
        ),
        eval_samples=(
            config.get("test_images") or config.get("test_samples") or config.get("valid_tokens")
        ),
        target=stored.target_for(r.task, r.target)["value"],
        direction=stored.target_for(r.task, r.target)["direction"],
        init_ms=started.timestamp() * 1000,
        clock_ms=clock.timestamp() * 1000,
        evaluations=evals,
        time_to_target=ttt,
        stop_seconds=stop,
        hyperparameters=hyper,
    )


def logged_evaluations(
    run: stored.StoredRun,
) -> tuple[list[stored.Evaluation], float | None, float]:
    """The evaluations the log holds, the time to target and the clock run_stop is at.

    A run that reached its target stops at the evaluation that reached it, that one
    included and found as the results find it (`StoredRun.reaching_evaluation`), never by
    comparing clocks: a time to target read a hair before its evaluation's clock once left
    that evaluation out, and with it the only eval_accuracy of a run that reached its goal
    at its first evaluation. A run that did not stops aborted at its last evaluation. A run
    that says it reached the target at a time none of its evaluations has keeps the
    evaluations up to that time, and the checker refuses the success it does not show."""
    evals = run.evaluations()
    ttt = run.time_to_target()
    reached = run.reaching_evaluation()
    if reached is not None:
        return evals[: evals.index(reached) + 1], ttt, reached.seconds
    if ttt is not None:
        return [e for e in evals if e.seconds <= ttt], ttt, ttt
    return evals, None, evals[-1].seconds if evals else 0.0


def write_log(rec: LogRecord) -> str:
    """The `:::MLLOG` lines of `rec`, made by MLCommons' MLLogger into a private logger."""
    out = io.StringIO()
    logger = logging.Logger("mlbench.mllog")  # not registered: no global logging state
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    ml = MLLogger(logger=logger, default_namespace="", root_dir=str(ROOT))

    def at(seconds: float) -> float:
        return round(rec.clock_ms + seconds * 1000, 3)

    init = round(rec.init_ms, 3)
    for key, value in (
        (C.SUBMISSION_ORG, ORG),
        (C.SUBMISSION_PLATFORM, rec.platform),
        (C.SUBMISSION_DIVISION, rec.division),
        (C.SUBMISSION_STATUS, STATUS),
        (C.SUBMISSION_BENCHMARK, rec.benchmark),
    ):
        ml.event(key, value, time_ms=init)
    # mlbench does not drop the page cache before a run: logged as false, not claimed.
    ml.event(C.CACHE_CLEAR, False, time_ms=init)
    ml.start(C.INIT_START, time_ms=init)
    ml.event(C.SEED, rec.seed, time_ms=init)
    ml.event(C.GLOBAL_BATCH_SIZE, rec.global_batch_size, time_ms=init)
    ml.event(C.GRADIENT_ACCUMULATION_STEPS, 1, time_ms=init)
    ml.event(C.OPT_NAME, "sgd", time_ms=init)
    if rec.base_lr is not None:
        ml.event(C.OPT_BASE_LR, rec.base_lr, time_ms=init)
    for key, value in rec.hyperparameters.items():
        ml.event(key, value, time_ms=init)
    if rec.train_samples is not None:
        ml.event(C.TRAIN_SAMPLES, rec.train_samples, time_ms=init)
    if rec.eval_samples is not None:
        ml.event(C.EVAL_SAMPLES, rec.eval_samples, time_ms=init)
    if rec.target is not None:
        ml.event(TARGET_KEY, rec.target, time_ms=init)
        ml.event(DIRECTION_KEY, rec.direction, time_ms=init)
    ml.end(C.INIT_STOP, time_ms=at(0))
    ml.start(C.RUN_START, time_ms=at(0))
    epoch, previous = 0.0, 0.0
    for e in rec.evaluations:
        done = float(e.epoch) if e.epoch is not None else epoch
        if done > epoch:
            block = {C.FIRST_EPOCH_NUM: epoch, C.EPOCH_COUNT: round(done - epoch, 6)}
            ml.start(C.BLOCK_START, metadata=block, time_ms=at(previous))
            ml.end(C.BLOCK_STOP, metadata={C.FIRST_EPOCH_NUM: epoch}, time_ms=at(e.seconds))
        meta = {C.EPOCH_NUM: done}
        ml.start(C.EVAL_START, metadata=meta, time_ms=at(e.seconds))
        ml.event(C.EVAL_ACCURACY, e.accuracy, metadata=meta, time_ms=at(e.seconds))
        ml.end(C.EVAL_STOP, metadata=meta, time_ms=at(e.seconds))
        epoch, previous = done, max(previous, e.seconds)
    status = C.SUCCESS if rec.time_to_target is not None else C.ABORTED
    ml.end(C.RUN_STOP, metadata={C.STATUS: status}, time_ms=at(rec.stop_seconds))
    return out.getvalue()


def run_log(run: Run) -> str:
    """The MLPerf-format log of a stored run."""
    return write_log(record_of(stored.load([run])[0]))


def series_zip(series: Any) -> bytes:
    """A zip of the series' logs in MLPerf's submission layout:
    results/<system>/<benchmark>/result_<i>.txt, one system per worker count and one file
    per seed (i: the seed's place in the series), runs still to finish left out."""
    runs = [r for r in series.runs.all() if r.state in Run.FINAL_STATES]
    order = {seed: i for i, seed in enumerate(series.seeds or [])}
    runs.sort(key=lambda r: (r.num_workers, order.get(r.seed, len(order)), r.seed, r.pk))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        counters: dict[int, int] = {}
        for item in stored.load(runs):
            r = item.run
            index = counters.get(r.num_workers, 0)
            counters[r.num_workers] = index + 1
            folder = f"results/{system_name(r)}/{MLPERF_BENCHMARKS.get(r.task, r.task)}"
            archive.writestr(f"{folder}/result_{index}.txt", write_log(record_of(item)))
    return buffer.getvalue()


def system_name(run: Run) -> str:
    """MLPerf's system folder for a run: one per worker count and device."""
    return f"mlbench-{run.num_workers}x{'gpu' if run.gpu_enabled else 'cpu'}"


def ruleset_args(task: str) -> list[str]:
    """The checker's options for a run of `task`: MLPerf's own closed rules for an MLPerf
    benchmark, our ruleset file otherwise."""
    args = ["--usage", "training", "--ruleset", MLPERF_RULESET]
    return args if task in MLPERF_BENCHMARKS else [*args, "--config", str(OWN_RULES)]


def checker_command(task: str, log_file: str) -> list[str]:
    """`python -m mlperf_logging.compliance_checker ...` for a log of `task` (docs and tests)."""
    return ["python", "-m", "mlperf_logging.compliance_checker", *ruleset_args(task), log_file]
