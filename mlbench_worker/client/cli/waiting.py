"""Waiting for a run: the progress line `mlbench run --wait` draws until the run ends.

Why a module of its own: the line is rebuilt every couple of seconds from the run record and
the newest metric points, on a terminal (one self-rewriting line) or in a log (a line per
change); how far a run is (the benchmark clock, the time budget, the epoch limit) and how
long it has left are decided here, so the polling loop stays a few lines.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from typing import Any

from mlbench_worker.client.cli.clock import benchmark_clock, metric_value
from mlbench_worker.client.cli.comparison import THROUGHPUT_METRICS, report_table, throughput_of
from mlbench_worker.client.cli.formatting import View, duration, percent, run_duration
from mlbench_worker.client.cli.master import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    FINAL_STATES,
    CliError,
    Master,
)

# Every task's throughput metric is asked for: one request serves runs of any task.
PROGRESS_METRICS = ",".join(
    ["epoch", "elapsed", "val_accuracy", "train_accuracy", *THROUGHPUT_METRICS]
)
POLL_SECONDS = 2.0


def wait_for(master: Master, run_id: int) -> int:
    """Poll the run and draw a progress line until it ends; then print its results."""
    bar = Progress(sys.stdout)
    try:
        while True:
            run = master.json("get_run", run_id)
            latest: dict[str, Any] = {}
            if run["state"] == "STARTED":
                latest = latest_metrics(master, run_id)
            bar.update(run, latest)
            if run["state"] in FINAL_STATES:
                break
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        bar.close()
        print(
            f"\nstopped waiting; run {run_id} goes on. Stop it with `mlbench delete {run_id}`.",
            file=sys.stderr,
        )
        return 130
    bar.close()
    print(f"run {run_id} {run['state']}" + (f": {run['reason']}" if run.get("reason") else ""))
    if run["state"] == "FINISHED":
        print()
        view = View.of(None)
        print(report_table(master, [run], view=view))
        for line in result_notes(run):
            print(view.say(line))
    else:
        print(f"see its output with `mlbench logs {run_id}`")
    print(f"\ndashboard: {master.url}/  (this run: {master.url}/runs/{run_id}/)")
    return EXIT_OK if run["state"] == "FINISHED" else EXIT_RUN_FAILED


def latest_metrics(master: Master, run_id: int) -> dict[str, Any]:
    """The newest point of each metric of a run: {name: {"value", "metadata", ...}}."""
    try:
        body = master.json("get_run_metrics", run_id, last_n=1, metric_filter=PROGRESS_METRICS)
    except CliError:
        return {}
    latest = {}
    if isinstance(body, dict):
        for name, points in body.items():
            if isinstance(points, list) and points:
                latest[name] = points[-1]
    return latest


class Progress:
    """One self-rewriting line on a terminal; a line per change (at most every 15 s) else."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.last_print = 0.0

    def update(self, run: dict, latest: dict[str, Any]) -> None:
        line = self.render(run, latest)
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + line[:width].ljust(min(width, max(len(self.last), 1))))
            self.stream.flush()
        elif line != self.last and time.monotonic() - self.last_print >= 15:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_print = time.monotonic()
        self.last = line

    def close(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()

    @staticmethod
    def render(run: dict, latest: dict[str, Any], now: dt.datetime | None = None) -> str:
        """The progress line of a run from its newest metric values.

        Time is the benchmark clock: the newest `elapsed` point (seconds since the first
        training step, evaluation included) plus the time since that point was dated, so
        mpirun and data start-up are not counted and the line keeps ticking between log
        intervals. Runs that post no `elapsed` (custom commands, older workers) fall back to
        wall time since the run started ("running"). The ETA is the sooner of the time
        budget's end and the epoch limit at the pace so far (benchmark seconds per epoch
        from the newest `elapsed` and `epoch`); reaching the target may end the run sooner.
        """
        state = run["state"]
        if state == "INITIALIZED":
            return f"run {run['id']}: waiting for workers"
        now = now or dt.datetime.now(dt.UTC)
        running = run_duration(run, now) or 0.0
        epoch = metric_value(latest, "epoch")
        clock = benchmark_clock(run, latest, now)
        spent = clock if clock is not None else running
        fraction, eta = _progress(run, epoch, spent, metric_value(latest, "elapsed"))
        if state == "STARTED" and fraction is not None:
            fraction = min(fraction, 0.99)  # done only when the run says so
        parts = [f"run {run['id']}"]
        if state in FINAL_STATES:
            fraction = 1.0 if state == "FINISHED" else fraction
        if fraction is not None:
            filled = int(round(fraction * 20))
            parts.append("[" + "#" * filled + "-" * (20 - filled) + f"] {100 * fraction:3.0f}%")
        if epoch is not None:
            total = f"/{run['max_epochs']}" if run.get("max_epochs") else ""
            parts.append(f"epoch {epoch:.2f}{total}")
        if "val_accuracy" in latest:
            parts.append(f"val acc {percent(latest['val_accuracy']['value'])}")
        if "train_accuracy" in latest:
            parts.append(f"train acc {percent(latest['train_accuracy']['value'])}")
        metric, unit = throughput_of(run, lambda m: m in latest)
        if metric and metric_value(latest, metric) is not None:
            parts.append(f"{metric_value(latest, metric):.0f} {unit}")
        if not latest and state == "STARTED":
            parts.append("starting, no metrics yet")
        if clock is not None:
            parts.append(f"elapsed {duration(clock)}")
        else:
            parts.append(f"running {duration(running)}")
        if eta is not None and state not in FINAL_STATES:
            parts.append(f"ETA ~{duration(eta)}")
        if state in FINAL_STATES:
            parts.append(state)
        return "  ".join(parts)


def _progress(
    run: dict, epoch: float | None, spent: float, elapsed_at_epoch: float | None
) -> tuple[float | None, float | None]:
    """(fraction done, seconds left) against the time budget and the epoch limit: the run
    stops at whichever comes first, so the larger fraction and the smaller ETA win."""
    fraction = eta = None
    # The budget the worker trains for: the run's own, else its task's (the master says).
    budget = run.get("effective_time_budget") or run.get("time_budget")
    max_epochs = run.get("max_epochs")
    if budget:
        fraction = min(1.0, spent / float(budget))
        eta = max(0.0, float(budget) - spent)
    if max_epochs and epoch:
        base = elapsed_at_epoch if elapsed_at_epoch is not None else spent
        pace = base / epoch  # seconds per epoch so far
        left = max(0.0, pace * (float(max_epochs) - epoch) - (spent - base))
        by_epoch = min(1.0, epoch / float(max_epochs))
        fraction = by_epoch if fraction is None else max(fraction, by_epoch)
        eta = left if eta is None else min(eta, left)
    return fraction, eta


def result_notes(run: dict[str, Any]) -> list[str]:
    """What a reader of the results table must know that the table cannot say: why the
    data set was synthetic, and why training stopped before its time budget."""
    summary = run.get("summary") or {}
    notes = []
    if summary.get("dataset") == "synthetic" and summary.get("dataset_note"):
        notes.append(
            f"note: generated (synthetic) data, not the task's real data set: "
            f"{summary['dataset_note']}"
        )
    stopped = summary.get("stop_reason")
    if run.get("time_budget") and stopped and stopped != "time budget spent":
        notes.append(f"note: training stopped before its time budget: {stopped}")
    return ["", *notes] if notes else []
