"""Benchmark: what the framework costs (the implementation dimension, issue 22).

1. ResNet-20 on synthetic CIFAR-10, 2 ranks, every implementation in turn for the same
   time budget: our reference loop (on mpi4py, and on gloo so that the backend is not what
   differs from DDP), torch-ddp (DistributedDataParallel on gloo) and tensorflow (Keras
   under MultiWorkerMirroredStrategy): images/s and the exposed communication share, first
   with the ranks on this machine (shared memory or loopback), then each in a local worker
   slot with its link shaped to 100 Mbit/s, as the local driver opens them (needs root; see
   bench_network.py).
2. One rank of each implementation against a plain training loop of its own framework on
   the same model and batch (a plain PyTorch loop for reference and torch-ddp, a plain
   Keras `train_on_batch` loop for tensorflow), each in a process of its own with the same
   threads, alternating, so what our loop adds on top of the framework is measured.

Every training number is the worker's own summary (train throughput, evaluation excluded).
Usage: python tests/benchmarks/bench_frameworks.py [--quick]
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

from common import launcher_prefix, machine, mpi_env, worker_summary, write_results  # noqa: E402

# (label, implementation, backend)
CONTENDERS = [
    ("reference (mpi)", "reference", "mpi"),
    ("reference (gloo)", "reference", "gloo"),
    ("torch-ddp (gloo)", "torch-ddp", "gloo"),
    ("tensorflow", "tensorflow", None),
]
BATCH = 128


def worker_argv(implementation: str, backend: str | None, images: int, budget: float,
                threads: int, metrics: Path) -> list[str]:  # fmt: skip
    argv = [
        sys.executable, "-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
        "--implementation", implementation, "--train-images", str(images), "--test-images",
        "500", "--time-budget", str(budget), "--threads", str(threads), "--metrics-file",
        str(metrics), "--log-every", "5", "--data-dir", str(metrics.parent / "data"),
    ]  # fmt: skip
    return argv + (["--backend", backend] if backend else [])


def two_ranks(home: Path, prefix: list[str], where: str, budget: float) -> list[dict]:
    """Each contender on 2 ranks started by `prefix`, for `budget` seconds."""
    results = []
    for label, implementation, backend in CONTENDERS:
        slug = "".join(c if c.isalnum() else "-" for c in where)
        metrics = home / f"{slug}-{implementation}-{backend}.jsonl"
        argv = prefix + worker_argv(implementation, backend, 5120, budget, 1, metrics)
        s = worker_summary(argv, home, metrics, timeout=budget * 10 + 600)
        results.append({"label": label, "where": where, **_speed(s)})
    return results


def _speed(summary: dict) -> dict:
    return {
        "images_per_sec": summary.get("images_per_sec"),
        "comm_share": summary.get("comm_share"),
        "implementation": summary.get("implementation"),
        "versions": summary.get("versions"),
        "note": summary.get("implementation_note") or "",
    }


# --- part 2: one rank against a plain loop of the same framework ---------------------------
PLAIN_TORCH = r"""
import sys, time, torch
import torch.nn.functional as F
from mlbench_worker.models import build_model
steps, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = build_model("resnet20")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
xs = [torch.randn(128, 3, 32, 32) for _ in range(steps)]
ys = [torch.randint(0, 10, (128,)) for _ in range(steps)]
def epoch():
    start = time.perf_counter()
    for x, y in zip(xs, ys):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return 128 * steps / (time.perf_counter() - start)
epoch()
print(max(epoch() for _ in range(2)))
"""
PLAIN_KERAS = r"""
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf, keras
from mlbench_worker.implementations.tensorflow.model import build_model
steps, threads = int(sys.argv[1]), int(sys.argv[2])
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(threads)
model = build_model("resnet20")
model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
xs = [rng.standard_normal((128, 32, 32, 3), dtype=np.float32) for _ in range(steps)]
ys = [rng.integers(0, 10, 128) for _ in range(steps)]
def epoch():
    start = time.perf_counter()
    for x, y in zip(xs, ys):
        model.train_on_batch(x, y)
    return 128 * steps / (time.perf_counter() - start)
epoch()
print(max(epoch() for _ in range(2)))
"""


def plain(script: str, steps: int, threads: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", script, str(steps), str(threads)],
        capture_output=True, text=True, timeout=1800, cwd=REPO, env=mpi_env(),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return float(done.stdout.strip().splitlines()[-1])


def one_rank(home: Path, implementation: str, steps: int, threads: int) -> float:
    """One rank of `implementation` for 3 epochs of `steps` batches; its train images/s."""
    metrics = home / f"one-{implementation}-{time.monotonic_ns()}.jsonl"
    backend = "gloo" if implementation == "torch-ddp" else None
    argv = worker_argv(implementation, backend, steps * BATCH, 600, threads, metrics)
    argv += ["--max-epochs", "3"]
    return worker_summary(argv, home, metrics, timeout=1800)["images_per_sec"]


def against_plain(home: Path, rounds: int, steps: int, threads: int) -> list[dict]:
    results = []
    for implementation, script, framework in [
        ("reference", PLAIN_TORCH, "PyTorch"),
        ("torch-ddp", PLAIN_TORCH, "PyTorch"),
        ("tensorflow", PLAIN_KERAS, "Keras"),
    ]:
        ours, theirs = [], []
        for i in range(rounds):  # each goes first in turn
            if i % 2:
                ours.append(one_rank(home, implementation, steps, threads))
                theirs.append(plain(script, steps, threads))
            else:
                theirs.append(plain(script, steps, threads))
                ours.append(one_rank(home, implementation, steps, threads))
        results.append({
            "implementation": implementation, "plain": f"plain {framework} loop",
            "ours": ours, "theirs": theirs, "ratio": max(ours) / max(theirs),
        })  # fmt: skip
    return results


def ratios(data: dict) -> list[dict]:
    """The run's ratios against their goals (common.ratio): each implementation's loop
    against its framework's plain loop (task 1a's loop goal), and on 2 ranks our reference
    loop against its peers on the same backend's footing (goal chosen here: no slower than a
    peer beyond that same loop goal)."""
    from common import ratio

    out = [
        ratio(f"1 rank: {r['implementation']} / a {r['plain']}, images/s (best)", r["ratio"],
              ">= 0.97")
        for r in data["one_rank"]
    ]  # fmt: skip
    speed = {(r["where"], r["label"]): r["images_per_sec"] for r in data["two_ranks"]}
    why = data.get("shaped_not_measured", "")
    for where in ("this machine", "slots at 100 Mbit/s"):
        for ours, peer in (("reference (gloo)", "torch-ddp (gloo)"),
                           ("reference (mpi)", "tensorflow")):  # fmt: skip
            a, b = speed.get((where, ours)), speed.get((where, peer))
            out.append(ratio(f"2 ranks, {where}: {ours} / {peer}, images/s",
                             a / b if a and b else None, ">= 0.97",
                             "" if a and b else why or "a contender gave no images/s"))  # fmt: skip
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a shorter budget, fewer rounds")
    args = parser.parse_args()
    from mlbench_master.cluster.local import network, slots

    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-frameworks-"))
    budget = 20.0 if args.quick else 60.0
    data: dict = {"machine": machine(), "two_ranks": [], "one_rank": []}
    data["two_ranks"] += two_ranks(home, launcher_prefix(2), "this machine", budget)
    missing = network.missing_capability()
    if missing:
        data["shaped_not_measured"] = missing
        print(f"bench_frameworks: the shaped links were not measured: {missing}")
    else:
        from bench_network import open_hosts, slot_launcher

        try:
            hosts = open_hosts(home, 100)
            prefix = slot_launcher(home, hosts)
            data["two_ranks"] += two_ranks(home, prefix, "slots at 100 Mbit/s", budget)
        finally:
            slots.close_slots(home)
    data["one_rank"] = against_plain(home, 2 if args.quick else 4, 20 if args.quick else 40, 2)
    rows = [
        [f"2 ranks, {r['where']}", r["label"], f"{r['images_per_sec'] or 0:.0f} images/s",
         f"comm {_pct(r['comm_share'])} exposed"]
        for r in data["two_ranks"]
    ]  # fmt: skip
    rows += [
        [f"1 rank vs a {r['plain']}", r["implementation"],
         f"{max(r['ours']):.0f} vs {max(r['theirs']):.0f} images/s", f"ratio {r['ratio']:.2f}"]
        for r in data["one_rank"]
    ]  # fmt: skip
    write_results(
        "frameworks", "Implementations side by side (ResNet-20, synthetic CIFAR-10)",
        ["set-up", "implementation", "speed", "communication / ratio"], rows, data,
        ratios=ratios(data),
    )  # fmt: skip
    print(json.dumps(data["two_ranks"], indent=1, default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
