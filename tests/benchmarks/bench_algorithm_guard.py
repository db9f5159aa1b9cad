"""Benchmark: what the harness costs an outside algorithm per step (issue 44).

An outside algorithm (docs/algorithms.rst) runs with the trainer's strict, counted wire and
every call through training/algorithm_guard.py's Guard (a clock read and a few attribute
writes per call, and the stall watchdog's thread waking every half second). A built-in runs
without them: its exchange reports its own bytes, and no guard wraps it. This measures what
that costs, side by side in one run on 2 ranks of this machine:

- allreduce: the built-in's flat all-reduce (`--no-overlap`, one all-reduce of the whole
  gradient buffer, scalar slots at its head) vs the same one all-reduce written against
  public.py and loaded from a file (the scalar slots ride along and are counted: 4 bytes
  each, beside the gradients);
- localsgd: the built-in vs the same algorithm (scalars summed every step, parameters and
  buffers averaged every `period` steps) written against public.py, loaded from a file.

Task 2 (logistic regression on its synthetic set): its steps take about a millisecond, so a
per-step cost of the harness shows most there; a ResNet's steps are a hundred times longer.
Each contender runs for the same time budget, in rounds, each of a pair going first in
turn (common.interleaved); the step time is the summary's (the batch of all ranks over the
samples per second inside training steps), the ratio outside / built-in per round, and the
median of the rounds is reported with their spread. Nothing asserts a time: this reports.

Usage: python tests/benchmarks/bench_algorithm_guard.py [--rounds N] [--budget S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import interleaved, launcher_prefix, machine, worker_summary, write_results  # noqa: E402

# The built-in allreduce's flat exchange, in the public interface: one all-reduce of the
# whole buffer (the gradients, prescaled by 1/ranks, and the scalar slots at its head).
ALLREDUCE = """
from mlbench_worker.algorithms.public import Algorithm

NAME = "allreduce-outside"
API = 1
OPTIONS = ()


class Allreduce(Algorithm):
    def finish(self) -> float:
        self.wire.allreduce_(self.grads.buffer)
        return 0.0
"""

# The built-in localsgd (algorithms/localsgd.py), in the public interface.
LOCALSGD = """
from mlbench_worker.algorithms.public import Algorithm, ModelVector, Option

NAME = "localsgd-outside"
API = 1
OPTIONS = (Option("period", "int", 4, "local steps between averagings", minimum=1),)


class LocalSgd(Algorithm):
    centralized = False

    def __init__(self, parts, options):
        super().__init__(parts, options)
        self.vector = ModelVector(parts.model)
        self.grad_scale = 1.0
        self.period = int(options["period"])

    def finish(self) -> float:
        self.sum_scalars()
        return 0.0

    def after_step(self, step: int) -> None:
        if step % self.period or self.comm.size == 1:
            return
        flat = self.vector.pack()
        self.wire.allreduce_(flat)
        flat.mul_(1.0 / self.comm.size)
        self.vector.unpack(flat)
"""
PAIRS = {
    "allreduce": (["--algorithm", "allreduce", "--no-overlap"], ALLREDUCE),
    "localsgd": (["--algorithm", "localsgd"], LOCALSGD),
}


def step_seconds(home: Path, label: str, algorithm: list[str], budget: float) -> dict:
    """Task 2 on 2 ranks for `budget` seconds with `algorithm` (worker flags): the seconds of
    one training step (the batch of both ranks over the samples per second inside training
    steps), the bytes per step and the load average before the run."""
    metrics = home / f"{label}.jsonl"
    metrics.unlink(missing_ok=True)
    argv = launcher_prefix(2) + [
        sys.executable, "-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic",
        "--target", "standard", "--max-epochs", "1000", "--time-budget", str(budget),
        "--train-samples", "20000", "--test-samples", "1000",
        "--threads", "1", "--seed", "3", "--metrics-file", str(metrics), *algorithm,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    summary = worker_summary(argv, home, metrics, timeout=budget * 10 + 300)
    rate = summary["samples_per_sec"]
    batch = summary["config"]["batch_size"] * summary["num_workers"]
    return {"step_s": batch / rate, "bytes": summary["comm_bytes_per_step"],
            "algorithm": summary["algorithm"], "load": round(load, 2)}  # fmt: skip


def measure(home: Path, name: str, rounds: int, budget: float) -> dict:
    """The built-in and its outside copy, `rounds` interleaved runs each."""
    flags, source = PAIRS[name]
    path = home / f"{name}_outside.py"
    path.write_text(source)
    builtin, outside = interleaved(
        lambda: step_seconds(home, f"{name}-outside", ["--algorithm", str(path)], budget),
        lambda: step_seconds(home, f"{name}-builtin", flags, budget),
        rounds,
        warm_up=False,
    )[::-1]
    ratios = [o["step_s"] / b["step_s"] for o, b in zip(outside, builtin, strict=True)]
    return {"builtin": builtin, "outside": outside, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each contender")
    parser.add_argument("--budget", type=float, default=10.0, help="training seconds per run")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 s (make bench QUICK=1)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.budget = min(args.rounds, 2), min(args.budget, 5.0)
    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-guard-"))
    data: dict = {"machine": machine(), "cpu_cores_online": os.cpu_count()}
    rows = []
    for name in PAIRS:
        got = data[name] = measure(home, name, args.rounds, args.budget)
        b_ms = statistics.median(r["step_s"] for r in got["builtin"]) * 1e3
        o_ms = statistics.median(r["step_s"] for r in got["outside"]) * 1e3
        ratio = statistics.median(got["ratios"])
        loads = [r["load"] for r in got["builtin"] + got["outside"]]
        rows.append([
            name, f"{b_ms:.3f} ms", f"{o_ms:.3f} ms", f"{ratio:.3f}x",
            f"{min(got['ratios']):.3f}-{max(got['ratios']):.3f}",
            f"{got['builtin'][0]['bytes']:,.0f} / {got['outside'][0]['bytes']:,.0f}",
            f"{min(loads):.2f}-{max(loads):.2f}",
        ])  # fmt: skip
    write_results(
        "algorithm_guard",
        f"The harness's cost per step: built-in vs the same algorithm as an outside module "
        f"(task 2, 2 ranks, {args.rounds} rounds of {args.budget:g} s)",
        ["algorithm", "built-in step", "outside step", "ratio (median)", "ratio range",
         "bytes/step built-in / outside", "load average (1 min)"],
        rows, data, ratios=[r for name in PAIRS for r in ratios(name, data[name])],
    )  # fmt: skip
    return 0


def ratios(name: str, got: dict) -> list[dict]:
    """The pair's ratios against their goals (common.ratio), both measured in turns here.
    Goals chosen here: the guard may cost a step no more than task 2's loop goal (>= 0.95)
    allows, and the outside copy is counted within 1 % of the built-in's bytes."""
    from common import ratio

    step = statistics.median(got["ratios"])
    spread = f"rounds {min(got['ratios']):.2f}-{max(got['ratios']):.2f}"
    built, out = got["builtin"][0]["bytes"], got["outside"][0]["bytes"]
    return [
        ratio(f"{name}: step time, outside module / built-in (median of rounds)", step,
              "<= 1.05", spread),
        ratio(f"{name}: bytes a step, outside module / built-in", out / built if built else None,
              "<= 1.01", f"{out:,.0f} / {built:,.0f}"),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
