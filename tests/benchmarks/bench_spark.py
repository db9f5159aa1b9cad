"""Benchmark: what Spark costs for task 2 against the reference (issue 34).

Logistic regression on the generated epsilon stand-in (the same rows for all), 2 ranks, to
the light target: the reference loop (mpi4py), the spark implementation's mini-batch SGD
(the same algorithm on a broadcast and a tree aggregate) and MLlib's L-BFGS. For each:
samples/s (training only), time to the light target on the benchmark clock, the share of a
step that is communication, and, apart, the start-up the clock leaves out (Spark: the
cluster's JVMs, the application with its executors, the cached data; every contender: the
whole process's wall time). First with both ranks on this machine, then each rank in a
local worker slot with its link shaped to 100 Mbit/s, as the local driver opens them (needs
root; see bench_network.py).

Every training number is the worker's own summary. Usage:
python tests/benchmarks/bench_spark.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import launcher_prefix, machine, mpi_env, write_results  # noqa: E402

# (label, implementation, algorithm)
CONTENDERS = [
    ("reference (mpi)", "reference", "allreduce"),
    ("spark SGD", "spark", "allreduce"),
    ("spark L-BFGS (MLlib)", "spark", "lbfgs"),
]


def worker_argv(implementation: str, algorithm: str, rows: int, metrics: Path) -> list[str]:
    return [
        sys.executable, "-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic",
        "--implementation", implementation, "--algorithm", algorithm, "--train-images",
        str(rows), "--test-images", str(rows // 4), "--target", "light", "--max-epochs", "10",
        "--threads", "1", "--metrics-file", str(metrics), "--log-every", "20",
        "--data-dir", str(metrics.parent / "data"),
    ]  # fmt: skip


def measure(home: Path, prefix: list[str], where: str, rows: int) -> list[dict]:
    """Each contender on 2 ranks started by `prefix`."""
    results = []
    for label, implementation, algorithm in CONTENDERS:
        slug = "".join(c if c.isalnum() else "-" for c in f"{where}-{label}")
        metrics = home / slug / "m.jsonl"
        metrics.parent.mkdir(parents=True, exist_ok=True)
        argv = prefix + worker_argv(implementation, algorithm, rows, metrics)
        start = time.perf_counter()
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=3600,
            env=mpi_env(MLBENCH_DATA_DIR=str(home / "data"), OMP_NUM_THREADS="1"),
        )  # fmt: skip
        wall = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
        summary = next(
            r for r in map(json.loads, metrics.read_text().splitlines()[::-1])
            if r.get("type") == "summary"
        )  # fmt: skip
        startup = summary["config"].get("spark_startup_seconds") or {}
        results.append({
            "label": label, "where": where, "samples_per_sec": summary.get("samples_per_sec"),
            "time_to_target": summary.get("time_to_target"), "comm_share": summary.get("comm_share"),
            "epochs": summary.get("epochs"), "startup": startup, "wall": wall,
            "stages": summary["config"].get("spark_stage_seconds"),
            "versions": summary.get("versions"),
        })  # fmt: skip
        print(json.dumps(results[-1], default=str), flush=True)
    return results


def _num(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller data set")
    args = parser.parse_args()
    from mlbench_master.cluster.local import network, slots

    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-spark-"))
    rows = 8000 if args.quick else 40000
    data: dict = {"machine": machine(), "rows": rows, "results": []}
    data["results"] += measure(home, launcher_prefix(2), "this machine", rows)
    missing = network.missing_capability()
    if missing:
        print(f"bench_spark: the shaped links were not measured: {missing}")
    else:
        from bench_network import open_hosts, slot_launcher

        try:
            hosts = open_hosts(home, 100)
            data["results"] += measure(
                home, slot_launcher(home, hosts), "slots at 100 Mbit/s", rows
            )
        finally:
            slots.close_slots(home)
    rows_out = [
        [
            f"2 ranks, {r['where']}", r["label"], f"{_num(r['samples_per_sec'], '.0f')}",
            f"{_num(r['time_to_target'], '.1f')} s", f"{_num(100 * (r['comm_share'] or 0), '.0f')} %",
            " + ".join(f"{k} {v:.0f}" for k, v in r["startup"].items()) or "-",
            f"{r['wall']:.0f} s",
        ]
        for r in data["results"]
    ]  # fmt: skip
    write_results(
        "spark", f"Task 2 on Spark against the reference ({rows} generated rows, light target)",
        ["set-up", "implementation", "samples/s", "time to light target", "comm share",
         "start-up apart (s)", "process wall"],
        rows_out, data,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
