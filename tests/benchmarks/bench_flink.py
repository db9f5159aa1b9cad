"""Benchmark: what Flink costs for task 2 against the reference and Spark (issue 46).

Logistic regression on the generated epsilon stand-in (the same rows for all), 2 ranks, to
the light target: the reference loop (mpi4py), the spark implementation's mini-batch SGD and
the flink implementation's (the same algorithm, batch and rates in one PyFlink streaming
job, in its own Python: MLBENCH_FLINK_PYTHON or .venv-flink). For each: samples/s (training
only), time to the light target on the benchmark clock, the communication share of a step,
the start-up the clock leaves out (each engine's own account) and the whole process's wall
time; then the ratios of Flink to the reference and to Spark side by side. First with both
ranks on this machine, then each rank in a local worker slot with its link shaped to
100 Mbit/s, as the local driver opens them (needs root; see bench_network.py).

Every training number is the worker's own summary. Usage:
python tests/benchmarks/bench_flink.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import launcher_prefix, machine, mpi_env, ratio, write_results  # noqa: E402

FLINK_PYTHON = os.environ.get("MLBENCH_FLINK_PYTHON") or str(REPO / ".venv-flink/bin/python")
# (label, implementation, the ranks' Python)
CONTENDERS = [
    ("reference (mpi)", "reference", sys.executable),
    ("spark SGD", "spark", sys.executable),
    ("flink SGD", "flink", FLINK_PYTHON),
]
STARTUP_KEYS = {"spark": "spark_startup_seconds", "flink": "flink_startup_seconds"}


def worker_argv(python: str, implementation: str, rows: int, metrics: Path) -> list[str]:
    return [
        python, "-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic",
        "--implementation", implementation, "--train-images", str(rows), "--test-images",
        str(rows // 4), "--target", "light", "--max-epochs", "10", "--threads", "1",
        "--metrics-file", str(metrics), "--log-every", "20",
        "--data-dir", str(metrics.parent / "data"),
    ]  # fmt: skip


def measure(home: Path, prefix: list[str], where: str, rows: int) -> list[dict]:
    """Each contender on 2 ranks started by `prefix`."""
    results = []
    for label, implementation, python in CONTENDERS:
        slug = "".join(c if c.isalnum() else "-" for c in f"{where}-{label}")
        metrics = home / slug / "m.jsonl"
        metrics.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        done = subprocess.run(
            prefix + worker_argv(python, implementation, rows, metrics), capture_output=True,
            text=True, timeout=3600,
            env=mpi_env(MLBENCH_DATA_DIR=str(home / "data"), OMP_NUM_THREADS="1"),
        )  # fmt: skip
        wall = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
        summary = next(
            r for r in map(json.loads, metrics.read_text().splitlines()[::-1])
            if r.get("type") == "summary"
        )  # fmt: skip
        startup = summary["config"].get(STARTUP_KEYS.get(implementation, ""), {})
        results.append({
            "label": label, "implementation": implementation, "where": where,
            "samples_per_sec": summary.get("samples_per_sec"),
            "time_to_target": summary.get("time_to_target"), "comm_share": summary.get("comm_share"),
            "epochs": summary.get("epochs"), "steps": summary.get("steps"), "startup": startup,
            "wall": wall, "versions": summary.get("versions"),
        })  # fmt: skip
        print(json.dumps(results[-1], default=str), flush=True)
    return results


def _num(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller data set")
    args = parser.parse_args()
    from mlbench_master.cluster.local import network, slots

    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-flink-"))
    rows = 8000 if args.quick else 40000
    data: dict = {"machine": machine(), "rows": rows, "results": []}
    data["results"] += measure(home, launcher_prefix(2), "this machine", rows)
    missing = network.missing_capability()
    if missing:
        print(f"bench_flink: the shaped links were not measured: {missing}")
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
    ratios = []
    for where in sorted({r["where"] for r in data["results"]}):
        got = {r["implementation"]: r for r in data["results"] if r["where"] == where}
        flink, ref, spark = got.get("flink", {}), got.get("reference", {}), got.get("spark", {})
        for other, name in ((ref, "reference"), (spark, "spark")):
            speed = _ratio(flink.get("samples_per_sec"), other.get("samples_per_sec"))
            slower = _ratio(flink.get("time_to_target"), other.get("time_to_target"))
            rows_out.append([
                f"2 ranks, {where}", f"flink / {name}", f"{_num(speed, '.3f')}x",
                f"{_num(slower, '.2f')}x", "", "",
                f"{_num(_ratio(flink.get('wall'), other.get('wall')), '.2f')}x",
            ])  # fmt: skip
            data.setdefault("ratios", {})[f"{where}: flink / {name}"] = {
                "samples_per_sec": speed, "time_to_target": slower,
            }  # fmt: skip
        ratios.append(ratio(
            f"flink / spark samples/s, {where}",
            _ratio(flink.get("samples_per_sec"), spark.get("samples_per_sec")), ">= 1",
            "the per-step round trip of Flink's standing job against a Spark job per step",
        ))  # fmt: skip
    write_results(
        "flink", f"Task 2 on Flink against the reference and Spark ({rows} generated rows, "
        "light target)",
        ["set-up", "implementation", "samples/s", "time to light target", "comm share",
         "start-up apart (s)", "process wall"],
        rows_out, data, ratios,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
