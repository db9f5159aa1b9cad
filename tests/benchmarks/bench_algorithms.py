"""Benchmark: where the training algorithms differ (the algorithm dimension, issue 21).

1. ResNet-20 on synthetic CIFAR-10, 2 workers, each in a local worker slot of its own with
   its link shaped to 10, 100 and 1,000 Mbit/s (as the local driver opens them; see
   bench_network.py), every algorithm in turn with its default options, for the same short
   time budget: images/s, the exposed communication share, the bytes a rank sent per step
   (and how many times less than a full fp32 all-reduce) and the validation accuracy after
   the budget.
2. Task 2 (logistic regression) on its synthetic set, 2 ranks on this machine: the time on
   the benchmark clock and the epochs each algorithm takes to reach the light target.

Every number comes from the worker's own summary (its metrics file), measured side by side
in one run on one machine. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) for part 1;
without it part 1 says why and part 2 still runs.
Usage: python tests/benchmarks/bench_algorithms.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from bench_network import open_hosts, slot_launcher  # noqa: E402
from common import launcher_prefix, machine, worker_summary, write_results  # noqa: E402

from mlbench_master.cluster.local import network, slots  # noqa: E402
from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS  # noqa: E402


def resnet(home: Path, mbit: int, algorithm: str, images: int, budget: float) -> dict:
    """ResNet-20 for `budget` seconds on two slots linked at `mbit`, with `algorithm`."""
    hosts = open_hosts(home, mbit)
    metrics = home / f"resnet-{algorithm}-{mbit}.jsonl"
    argv = slot_launcher(home, hosts) + [
        sys.executable, "-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
        "--algorithm", algorithm, "--train-images", str(images), "--test-images", "500",
        "--time-budget", str(budget), "--threads", "1", "--metrics-file", str(metrics),
        "--log-every", "5",
    ]  # fmt: skip
    return worker_summary(argv, home, metrics, timeout=budget * 10 + 600)


def linear(home: Path, algorithm: str, max_epochs: int) -> dict:
    """Task 2 on its synthetic set, 2 ranks on this machine, until the light target."""
    metrics = home / f"linear-{algorithm}.jsonl"
    argv = launcher_prefix(2) + [
        sys.executable, "-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic",
        "--algorithm", algorithm, "--target", "light", "--max-epochs", str(max_epochs),
        "--threads", "1", "--metrics-file", str(metrics),
    ]  # fmt: skip
    return worker_summary(argv, home, metrics, timeout=1800)


def sent(summary: dict) -> str:
    value = summary.get("comm_bytes_per_step")
    ratio = summary.get("compression_ratio")
    if value is None:
        return "-"
    return f"{value / 1e3:.1f} kB/step" + (f" ({ratio:.1f}x less)" if ratio else "")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer links, a shorter budget")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-algorithms-"))
    rows: list[list] = []
    data: dict = {"machine": machine(), "resnet": {}, "linear": {}}
    missing = network.missing_capability()
    links = (10, 100) if args.quick else (10, 100, 1000)
    budget = 20.0 if args.quick else 60.0
    if missing:
        print(f"bench_algorithms: part 1 (shaped links) not measured: {missing}")
    else:
        try:
            for mbit in links:
                for name in ALGORITHMS:
                    s = resnet(home, mbit, name, 2560, budget)
                    data["resnet"][f"{name}@{mbit}"] = s
                    rows.append([
                        f"ResNet-20, {mbit} Mbit/s, {name}",
                        f"{s.get('images_per_sec') or 0:.0f} images/s",
                        f"comm {100 * (s.get('comm_share') or 0):.1f} % exposed",
                        sent(s),
                        f"val acc {100 * (s.get('final_val_accuracy') or 0):.1f} % "
                        f"after {budget:g} s",
                    ])  # fmt: skip
        finally:
            slots.close_slots(home)
    for name in ALGORITHMS:
        s = linear(home, name, 10 if args.quick else 20)
        data["linear"][name] = s
        ttt = s.get("time_to_target")
        rows.append([
            f"task 2 (synthetic), {name}",
            f"light target in {ttt:.1f} s" if ttt is not None else "light target not reached",
            f"{s.get('epochs', 0):.2f} epochs",
            sent(s),
            f"final val acc {100 * (s.get('final_val_accuracy') or 0):.1f} %",
        ])  # fmt: skip
    write_results(
        "algorithms", "Training algorithms side by side (2 workers)",
        ["run", "speed", "communication / epochs", "sent per step", "accuracy"], rows, data,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
