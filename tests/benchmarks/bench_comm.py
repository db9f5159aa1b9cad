"""The backend benchmark task (`backend-benchmark`) against a bare mpi4py loop.

1. The task's sweep (mpi and gloo, all-reduce and broadcast) under a launcher: by default
   `mpirun -n 2` on this machine; `run_sweep(launcher=[...])` takes any prefix that starts
   the ranks elsewhere (e.g. the local cluster's shaped network slots), so the same numbers
   can be taken at 100 and 1,000 Mbit/s.
2. Side by side in the same run: a bare loop of back-to-back mpi4py all-reduces per size
   (timed as one batch, no per-repeat agreement) under the same launcher. The ratio of the
   task's median time to the bare loop's mean shows what its per-repeat alignment (one tiny
   MPI all-reduce before each repeat) costs: near 1 for large messages, above 1 for tiny ones.

Nothing is asserted. Usage: python tests/benchmarks/bench_comm.py [--quick] [--launcher ...]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import launcher_prefix, mpi_env, write_results  # noqa: E402

DEFAULT_LAUNCHER = launcher_prefix(2)
BARE = """
import json, sys, time
import numpy as np
from mpi4py import MPI
w = MPI.COMM_WORLD
out = {}
for size in map(int, sys.argv[1].split(",")):
    buf = np.zeros(size // 4, dtype=np.float32)
    n = max(3, min(200, int(2e8 // max(size, 1))))
    for _ in range(3):
        w.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        w.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    dt = w.allreduce(time.perf_counter() - t0, op=MPI.MAX) / n
    out[size] = dt
if w.Get_rank() == 0:
    print("BARE " + json.dumps(out))
"""


def run_sweep(launcher: list[str] | None = None, *extra: str, timeout: float = 1800) -> dict:
    """The task's summary after one sweep started with `launcher` (default: 2 local ranks)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "comm.jsonl"
        cmd = [*(launcher or DEFAULT_LAUNCHER), sys.executable, "-m", "mlbench_worker",
               "backend-benchmark", "--metrics-file", str(out), *extra]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())
        if proc.returncode != 0:
            raise RuntimeError(
                f"{shlex.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        records = [json.loads(line) for line in out.read_text().splitlines()]
    return next(r for r in records if r["type"] == "summary")


def run_bare(sizes: list[int], launcher: list[str] | None = None) -> dict[int, float]:
    """Mean seconds per back-to-back mpi4py all-reduce, per size (slowest rank)."""
    cmd = [*(launcher or DEFAULT_LAUNCHER), sys.executable, "-c", BARE, ",".join(map(str, sizes))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=mpi_env())
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BARE "))
    return {int(k): v for k, v in json.loads(line[5:]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 KiB..4 MiB in powers of 4")
    parser.add_argument("--launcher", help="command prefix that starts the ranks (quoted)")
    parser.add_argument("--label", default="local", help="what the network is, for the table")
    args = parser.parse_args()
    launcher = shlex.split(args.launcher) if args.launcher else None
    extra = ["--max-size", "4MiB", "--size-factor", "4"] if args.quick else []
    summary = run_sweep(launcher, *extra)
    mpi_allreduce = {
        r["size"]: r for r in summary["results"] if r["op"] == "allreduce" and r["backend"] == "mpi"
    }
    bare = run_bare(sorted(mpi_allreduce), launcher)
    rows = []
    for r in summary["results"]:
        ratio = ""
        if r["op"] == "allreduce" and r["backend"] == "mpi" and r["size"] in bare:
            ratio = round(r["latency_median_us"] / (bare[r["size"]] * 1e6), 2)
        rows.append([args.label, r["op"], r["backend"], r["size"], r["repeats"],
                     r["latency_median_us"], r["busbw_median_mbps"], r["busbw_best_mbps"], ratio])  # fmt: skip
    write_results(
        f"comm-{args.label}",
        f"Backend benchmark ({args.label}): bus bandwidth per size, 2 ranks",
        [
            "network",
            "op",
            "backend",
            "bytes",
            "repeats",
            "latency median us",
            "busbw median Mbit/s",
            "busbw best Mbit/s",
            "task / bare mpi4py time",
        ],  # fmt: skip
        rows,
        {"summary": summary, "bare_seconds": bare},
        ratios=ratios(mpi_allreduce, bare, args.label),
    )


def ratios(mpi_allreduce: dict[int, dict], bare: dict[int, float], label: str) -> list[dict]:
    """The task's mpi all-reduce against the bare mpi4py loop measured beside it, at
    ResNet-20's gradient size (1 MiB) and at the largest message: its per-repeat alignment
    should cost little there (goal: the worker's against raw mpi4py, <= 1.1)."""
    from common import ratio

    out = []
    for size in sorted({1 << 20, max(mpi_allreduce, default=0)}):
        r, b = mpi_allreduce.get(size), bare.get(size)
        value = r["latency_median_us"] / (b * 1e6) if r and b else None
        why = "" if value is not None else f"{size} bytes not in both sweeps"
        shown = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        out.append(ratio(f"{label}: all-reduce {shown}, task (median) / bare "
                         "mpi4py loop (mean), time", value, "<= 1.1", why))  # fmt: skip
    return out


if __name__ == "__main__":
    main()
