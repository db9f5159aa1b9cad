"""What writing its predictions costs a run of the reference worker, side by side in one run.

The reference worker's task 1a loop (ResNet-20 on the generated CIFAR-10 set, 2 ranks of one
thread under mpirun, a few short epochs with an evaluation after each) runs with its
predictions sink and without it, in turns (common.interleaved: without, with, with,
without, ...; the full form after a warm-up run of each), so load from other jobs on a
shared machine falls on both alike. Each run reports to a recording HTTP server on loopback
started here, as a run reports to its master: metric batches, the summary and, with the
sink, one predictions file per evaluation.

Reported: the time of an evaluation with and without the sink (best and median) and their
difference; the sink's own part timed where it runs (rank 0's gather, write and hand-over,
and the reporter thread's post of each file); the whole run's time (mpirun started to
mpirun done) and the benchmark clock, with their ratios. Nothing is asserted; the targets
are printed.

Why the switch is here and not a worker option: the sink is on whenever a run reports
anywhere (a metrics file or a master), and a run that reports nowhere leaves nothing to
time. A run that reports but keeps its predictions from the evaluator is not something a
user should be able to ask for (the platform would show it as not evaluated), so the ranks
start through this file (`--child`), which turns the sink the run opened off (its own
`enabled`, the state of a run that reports nowhere: no batches kept, nothing gathered,
written or posted) and times the evaluations; the rest is the worker's own entry point.
Usage: python tests/benchmarks/bench_prediction_sink.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import interleaved, launcher_prefix, mpi_env, write_results  # noqa: E402

RANKS = 2
TOKEN = "bench-prediction-sink"  # sent as a run's token is; the recording server checks none


# --- the ranks (inside mpirun) -----------------------------------------------------------
def _timed(method: Callable, into: list[float]) -> Callable:
    def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)

    return timed


def child(sink_on: bool, timings: Path, worker_argv: list[str]) -> int:
    """One rank of the worker, its sink left on or turned off, its evaluations timed; the
    times go to `timings`/rank<N>.json."""
    from mlbench_worker.__main__ import main as worker_main
    from mlbench_worker.training import rank_body as worker_run
    from mlbench_worker.training.metric_sink import HttpReporter
    from mlbench_worker.training.option_parts import launch_rank
    from mlbench_worker.training.prediction_sink import PredictionSink
    from mlbench_worker.training.trainer import Trainer

    times: dict[str, list[float]] = {"evaluation": [], "submit": [], "post": []}
    open_sink = worker_run.open_sink

    def opened(*args, **kwargs) -> PredictionSink:  # noqa: ANN002, ANN003
        sink = open_sink(*args, **kwargs)  # collective: every rank opens it either way
        sink.enabled = sink.enabled and sink_on
        return sink

    worker_run.open_sink = opened
    Trainer.evaluate_and_track = _timed(Trainer.evaluate_and_track, times["evaluation"])
    PredictionSink.submit = _timed(PredictionSink.submit, times["submit"])
    HttpReporter._send_one_file = _timed(HttpReporter._send_one_file, times["post"])
    code = worker_main(worker_argv)
    (timings / f"rank{launch_rank()}.json").write_text(json.dumps(times))
    return code


# --- the master's stand-in -----------------------------------------------------------------
class Recorder:
    """A live HTTP server on loopback that takes every POST a run makes (201) and counts
    them per run: the predictions files and their bytes, the summary; metric batches in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, dict[str, int]] = {}
        self.metric_posts = 0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.took(self.path, len(body))
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def took(self, path: str, size: int) -> None:
        parts = path.split("?")[0].strip("/").split("/")  # api, runs, ID, predictions|summary
        with self.lock:
            if parts[:2] == ["api", "metrics"]:
                self.metric_posts += 1
            elif len(parts) == 4 and parts[:2] == ["api", "runs"]:
                run = self.runs.setdefault(parts[2], {"files": 0, "bytes": 0, "summary": 0})
                if parts[3] == "predictions":
                    run["files"] += 1
                    run["bytes"] += size
                elif parts[3] == "summary":
                    run["summary"] += 1

    def of(self, run_id: str) -> dict[str, int]:
        with self.lock:
            return dict(self.runs.get(run_id, {"files": 0, "bytes": 0, "summary": 0}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- one run, from outside -----------------------------------------------------------------
def one_run(sink_on: bool, size: dict, recorder: Recorder, count: list[int]) -> dict:
    """One whole run under mpirun: its wall time, benchmark clock, rank 0's timings and
    what the recording server received from it."""
    count[0] += 1
    run_id = f"{'with' if sink_on else 'without'}-{count[0]}"
    with tempfile.TemporaryDirectory(prefix="mlbench-bench-sink-") as tmp:
        home = Path(tmp)
        metrics = home / "metrics.jsonl"
        worker = [
            "resnet20-cifar10", "--dataset", "synthetic", "--threads", "1",
            "--train-images", str(size["train"]), "--test-images", str(size["test"]),
            "--max-epochs", str(size["epochs"]), "--log-every", "1000000",
            "--metrics-file", str(metrics), "--master-url", recorder.url, "--run-id", run_id,
        ]  # fmt: skip
        argv = [*launcher_prefix(RANKS), sys.executable, __file__, "--child",
                "on" if sink_on else "off", str(home), "--", *worker]  # fmt: skip
        env = mpi_env(
            MLBENCH_DATA_DIR=str(home / "data"), OMP_NUM_THREADS="1", MLBENCH_RUN_TOKEN=TOKEN
        )
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
        wall = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
        summary = next(
            json.loads(line)
            for line in reversed(metrics.read_text().splitlines())
            if '"summary"' in line
        )
        times = json.loads((home / "rank0.json").read_text())
        written = sorted((home / "predictions").glob("*")) if sink_on else []
    got = recorder.of(run_id)
    evaluations = len(times["evaluation"])
    expected = evaluations if sink_on else 0
    if got["files"] != expected or len(written) != expected or not got["summary"]:
        raise RuntimeError(
            f"run {run_id}: {evaluations} evaluations, {len(written)} files written, "
            f"{got['files']} received, {got['summary']} summaries: the sink "
            f"{'should' if sink_on else 'should not'} have written and posted one each"
        )
    return {"wall_s": wall, "clock_s": summary["elapsed"], "received": got, **times}


def _pooled(runs: list[dict], key: str) -> list[float]:
    return [t for r in runs for t in r[key]]


def _both(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """Best and median as "a / b"; on a shared machine the best is the least disturbed."""
    return f"{scale * min(values):.{digits}f} / {scale * statistics.median(values):.{digits}f}"


def table(on: list[dict], off: list[dict]) -> list[list]:
    """The rows: evaluations with and without, the sink's parts, the whole runs. Ratios
    and differences are of the best values; the medians stand beside them."""
    eval_on, eval_off = _pooled(on, "evaluation"), _pooled(off, "evaluation")
    added = 1000 * (min(eval_on) - min(eval_off))
    per_eval = 1000 * statistics.median(eval_on)  # the evaluations the sink was timed in
    submit = 1000 * statistics.median(_pooled(on, "submit"))
    post = 1000 * statistics.median(_pooled(on, "post"))
    files = sum(r["received"]["files"] for r in on)
    kib = sum(r["received"]["bytes"] for r in on) / max(files, 1) / 1024
    wall_on, wall_off = [r["wall_s"] for r in on], [r["wall_s"] for r in off]
    clock_on, clock_off = [r["clock_s"] for r in on], [r["clock_s"] for r in off]
    pairs = ", ".join(f"{a / b:.3f}" for a, b in zip(wall_on, wall_off, strict=True))
    return [
        ["time per evaluation, rank 0, ms (best / median)", _both(eval_on, 1000),
         _both(eval_off, 1000), f"{added:+.1f} ms ({100 * added / (1000 * min(eval_off)):+.2f} %)",
         "< 1 % of an evaluation"],
        ["in the loop, rank 0: gather + write + queue, ms", _both(_pooled(on, "submit"), 1000, 2),
         "-", f"{100 * submit / per_eval:.3f} % of an evaluation (medians)", "-"],
        ["off the loop, reporter thread: post of one file, ms",
         _both(_pooled(on, "post"), 1000, 2), "-", f"{files} files of {kib:.0f} KiB received",
         "-"],
        ["the sink's own work per evaluation (the two above, medians), ms",
         f"{submit + post:.2f}", "-", f"{100 * (submit + post) / per_eval:.3f} % of an evaluation",
         "< 1 %"],
        ["whole run (mpirun start to exit), s (best / median)", _both(wall_on, digits=2),
         _both(wall_off, digits=2), f"{min(wall_on) / min(wall_off):.3f}x (pairs: {pairs})",
         "<= 1.01x"],
        ["benchmark clock (the run's elapsed), s (best / median)", _both(clock_on, digits=2),
         _both(clock_off, digits=2), f"{min(clock_on) / min(clock_off):.3f}x", "<= 1.01x"],
    ]  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # inside mpirun: --child on|off TIMINGS -- WORKER ARGS
        sys.exit(child(sys.argv[2] == "on", Path(sys.argv[3]), sys.argv[5:]))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller test set, fewer rounds")
    args = parser.parse_args()
    # quick: a tenth of the test set; full: the whole generated test set (the file a real
    # run of task 1a writes), each rank evaluating its half.
    size = (
        {"train": 512, "test": 1000, "epochs": 2, "rounds": 4}
        if args.quick
        else {"train": 1280, "test": 10_000, "epochs": 3, "rounds": 3}
    )
    print(
        f"task 1a, {RANKS} ranks x 1 thread, {size['train']} training / {size['test']} test "
        f"images, {size['epochs']} epochs; {size['rounds']} rounds of with / without the "
        "sink ...",
        flush=True,
    )
    recorder = Recorder()
    count = [0]
    try:
        on, off = interleaved(
            lambda: one_run(True, size, recorder, count),
            lambda: one_run(False, size, recorder, count),
            size["rounds"],
            warm_up=not args.quick,  # fresh processes: a warm-up only fills the page cache
        )
    finally:
        recorder.close()
    evaluations = len(on[0]["evaluation"])
    write_results(
        "prediction_sink",
        f"The predictions sink in the training loop: task 1a, {RANKS} ranks, "
        f"{size['test']:,} test images, {evaluations} evaluations a run, "
        f"{size['rounds']} rounds",
        ["measure", "with sink", "without", "difference / ratio", "target"],
        table(on, off),
        {
            "size": size,
            "quick": args.quick,
            "metric_posts": recorder.metric_posts,
            "with_sink": on,
            "without_sink": off,
        },
        ratios=ratios(on, off),
    )


def ratios(on: list[dict], off: list[dict]) -> list[dict]:
    """The table's targets as ratios (common.ratio), with and without the sink side by
    side: best values, as in the table; the sink's own work against the evaluations it was
    timed in (medians)."""
    from common import ratio

    eval_on, eval_off = _pooled(on, "evaluation"), _pooled(off, "evaluation")
    own = statistics.median(_pooled(on, "submit")) + statistics.median(_pooled(on, "post"))
    best = {k: [min(r[k] for r in runs) for runs in (on, off)] for k in ("wall_s", "clock_s")}
    return [
        ratio("time per evaluation, rank 0, with / without the sink", min(eval_on) / min(eval_off),
              "<= 1.01"),
        ratio("the sink's own work (gather, write, queue; post) / an evaluation",
              own / statistics.median(eval_on), "<= 0.01"),
        ratio("whole run (mpirun start to exit), with / without the sink",
              best["wall_s"][0] / best["wall_s"][1], "<= 1.01"),
        ratio("benchmark clock, with / without the sink", best["clock_s"][0] / best["clock_s"][1],
              "<= 1.01"),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
