"""Benchmarks of task 2 (logreg-epsilon), measured side by side in one run.

1. Our training loop (LinearTrainer, 1 rank) vs a plain PyTorch loop on the same rows, batch
   and threads: samples/s. The plain loop is what one would write without a benchmark
   around it: autograd and torch.optim.SGD. A second plain loop uses our closed-form
   gradient without any of our bookkeeping, which shows what the bookkeeping costs.
2. The real worker on 2 ranks (mpirun): communication's share of the step, samples/s.
3. The LIBSVM conversion rate (plain and .bz2 text), which decides how long the one-time
   conversion of the 12 GB epsilon text takes.
4. Peak resident memory per rank (VmHWM) of the real worker on 2 ranks reading a
   400,000 x 2,000 synthetic set written as the on-disk epsilon cache, against its shard,
   and how long a run takes to start from that cache.

Nothing is asserted; each target is printed next to its measurement.
Usage: python tests/benchmarks/bench_logreg.py [--quick]
"""

from __future__ import annotations

import argparse
import bz2
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

from common import launcher_prefix, mpi_env  # noqa: E402

FEATURES = 2000


# --- 1. loop overhead ------------------------------------------------------------------------
def bench_loop(threads: int, rows: int, rounds: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from mlbench_worker.tasks.epsilon import synthetic
    from mlbench_worker.tasks.epsilon.data import Rows, epoch_order
    from mlbench_worker.tasks.epsilon.glm import LinearModel, get_glm
    from mlbench_worker.tasks.epsilon.train import LinearTrainer, plateau_schedule
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal

    torch.set_num_threads(threads)
    batch, lr, l2 = 128, 4.0, 2.5e-6
    x_np, y_np = synthetic.rows(0, "train", rows, np.arange(rows), FEATURES)
    tx, ty = synthetic.rows(0, "test", 1000, np.arange(1000), FEATURES)
    comm = Communicator("mpi")
    glm = get_glm("logistic-regression")
    model = LinearModel(FEATURES)
    trainer = LinearTrainer(
        model, glm, torch.optim.SGD(model.parameters(), lr=lr, weight_decay=l2),
        plateau_schedule(lr, lr, 0.75, 0.01), Goal("never", 1.01, 10**6), comm,
        Rows(x_np, y_np, batch), Rows(tx, ty, 1000), Reporter(), seed=0,
        device=torch.device("cpu"), log_every=10**9, print_fn=lambda _m: None,
    )  # fmt: skip
    trainer.clock_start = time.perf_counter()

    # The plain loops get the same rows as one tensor and the same shuffled order.
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    plain_w = torch.zeros(FEATURES + 1, requires_grad=True)
    plain_opt = torch.optim.SGD([plain_w], lr=lr, weight_decay=l2)

    def plain_autograd(order: torch.Tensor) -> None:
        for start in range(0, rows, batch):
            idx = order[start : start + batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            plain_opt.zero_grad()
            z = xb @ plain_w[:-1] + plain_w[-1]
            F.softplus(-yb * z).mean().backward()
            plain_opt.step()

    closed = torch.nn.Parameter(torch.zeros(FEATURES + 1))
    closed.grad = torch.zeros(FEATURES + 1)
    closed_opt = torch.optim.SGD([closed], lr=lr, weight_decay=l2)

    def plain_closed_form(order: torch.Tensor) -> None:
        w, closed_g = closed.data, closed.grad
        for start in range(0, rows, batch):
            idx = order[start : start + batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            z = torch.addmv(w[-1], xb, w[:-1])
            _, dz, _ = glm.batch(z, yb, 1.0 / yb.shape[0])
            torch.mv(xb.t(), dz, out=closed_g[:-1])
            torch.sum(dz, 0, out=closed_g[-1])
            closed_opt.step()

    epoch = [0]

    def timed(fn: object) -> float:
        order = torch.from_numpy(epoch_order(rows, 0, epoch[0], 0))
        epoch[0] += 1
        start = time.perf_counter()
        fn(order)  # type: ignore[operator]
        return rows / (time.perf_counter() - start)

    def ours(_order: torch.Tensor) -> None:
        trainer.train_one_epoch(epoch[0])

    contenders = {"ours": ours, "plain": plain_autograd, "closed": plain_closed_form}
    for fn in contenders.values():  # warm-up
        timed(fn)
    results: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for i in range(rounds):  # rotated: no contender always goes first
        for name in names[i % 3 :] + names[: i % 3]:
            results[name].append(timed(contenders[name]))
    comm.close()
    return {
        "threads": threads,
        "rows": rows,
        **results,
        # Best round of each: on a shared machine the least disturbed by other load.
        "ratio_plain": max(results["ours"]) / max(results["plain"]),
        "ratio_closed": max(results["ours"]) / max(results["closed"]),
    }


# --- 2 and 3. the real worker on 2 ranks -----------------------------------------------------
def rank_child(argv: list[str]) -> None:
    """One rank of the real worker, then its peak memory (runs under mpirun)."""
    import resource

    from mlbench_worker.__main__ import main

    code = main(argv)
    status = Path("/proc/self/status").read_text()
    hwm = next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmHWM" in line)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("MEMORY " + json.dumps({"rank": rank, "vmhwm": hwm, "maxrss": maxrss}), flush=True)
    sys.exit(code)


def run_worker(ranks: int, worker_args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.jsonl"
        args = [sys.executable, __file__, "--rank-child", "--", "logreg-epsilon",
                "--threads", "1", "--log-every", "100000", "--metrics-file", str(out),
                *worker_args]  # fmt: skip
        if ranks > 1:
            args = [*launcher_prefix(ranks), *args]
        start = time.perf_counter()
        proc = subprocess.run(
            args, capture_output=True, text=True, env=mpi_env(OMP_NUM_THREADS="1"), timeout=1800
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
        summary = next(json.loads(x) for x in out.read_text().splitlines() if '"summary"' in x)
    memory = sorted(
        (json.loads(x[7:]) for x in proc.stdout.splitlines() if x.startswith("MEMORY ")),
        key=lambda m: m["rank"],
    )
    return {"summary": summary, "memory": memory, "wall": wall}


def write_synthetic_cache(data_dir: Path, train_rows: int, test_rows: int) -> float:
    """The synthetic set, written as epsilon's cache (no text source): seconds taken."""
    import numpy as np

    from mlbench_worker.tasks.epsilon import reader, synthetic

    start = time.perf_counter()
    for split, total in (("train", train_rows), ("test", test_rows)):
        writer = reader.CacheWriter(data_dir, split, FEATURES)
        for first in range(0, total, 16384):
            idx = np.arange(first, min(total, first + 16384))
            x, y = synthetic.rows(0, split, total, idx, FEATURES)
            writer.append(x, y)
        writer.commit(None)
    return time.perf_counter() - start


# --- 4. conversion rate ----------------------------------------------------------------------
def bench_conversion(rows: int) -> dict:
    import numpy as np

    from mlbench_worker.tasks.epsilon import reader

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    lines = [
        ("1 " if i % 2 else "-1 ") + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
        for i, row in enumerate(x)
    ]
    text = ("\n".join(lines) + "\n").encode()
    result = {"rows": rows, "text_mb": len(text) / 1e6}
    import sklearn.datasets  # noqa: F401 - its import (~1.5 s) is not part of the rate

    with tempfile.TemporaryDirectory() as tmp:
        for kind, name, data in (
            ("plain", "epsilon_normalized", text),
            ("bz2", "epsilon_normalized.bz2", bz2.compress(text, 6)),
        ):
            folder = Path(tmp) / kind
            folder.mkdir()
            (folder / name).write_bytes(data)
            start = time.perf_counter()
            reader.convert(folder / name, folder, "train", FEATURES, say=lambda _m: None)
            seconds = time.perf_counter() - start
            result[kind] = {"seconds": seconds, "text_mb_per_s": len(text) / 1e6 / seconds}
    return result


def main() -> None:
    from common import write_results

    if "--rank-child" in sys.argv:
        rank_child(sys.argv[sys.argv.index("--") + 1 :])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rows and rounds")
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    threads = max(1, min(4, cores // 2))
    loop_rows, rounds, scale_rows = (16_384, 3, 100_000) if args.quick else (32_768, 7, 200_000)
    memory_rows = (100_000, 25_000) if args.quick else (400_000, 100_000)

    print(f"[1/4] training loop, {threads} thread(s), {rounds} rounds ...", flush=True)
    loop = bench_loop(threads, loop_rows, rounds)
    print("[2/4] the worker on 1 and 2 ranks (synthetic) ...", flush=True)
    common_args = ["--dataset", "synthetic", "--train-samples", str(scale_rows),
                   "--test-samples", "10000", "--max-epochs", "1"]  # fmt: skip
    one = run_worker(1, common_args)
    two = run_worker(2, common_args)
    # Before the 4 GB cache is written: its write-back to disk would slow the conversion.
    print("[3/4] LIBSVM conversion rate ...", flush=True)
    conversion = bench_conversion(1000 if args.quick else 3000)
    print(f"[4/4] memory per rank, {memory_rows[0]:,} x {FEATURES:,} cache on disk ...", flush=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("MLBENCH_BENCH_TMP")) as tmp:
        write_seconds = write_synthetic_cache(Path(tmp), *memory_rows)
        big_args = ["--dataset", "epsilon", "--data-dir", tmp, "--max-epochs", "1"]
        first = run_worker(2, big_args)  # right after writing: pages still being written back
        big = run_worker(2, big_args)  # a later run, as users start them

    row_bytes = FEATURES * 4 + 4  # features and label
    shard = memory_rows[0] // 2 * row_bytes
    test_part = memory_rows[1] // 2 * row_bytes
    rows = [
        ["loop: ours vs plain PyTorch (autograd + SGD), samples/s, best of "
         f"{rounds}, 1 rank x {threads} thread(s)",
         f"{max(loop['ours']):,.0f}", f"{max(loop['plain']):,.0f}",
         f"{loop['ratio_plain']:.2f}", ">= 0.95", loop["ratio_plain"] >= 0.95],
        ["loop: ours vs a plain loop doing our closed-form step (loss and accuracy included) "
         "without timing, all-reduce or reporting: the bookkeeping's cost",
         f"{max(loop['ours']):,.0f}", f"{max(loop['closed']):,.0f}",
         f"{loop['ratio_closed']:.2f}", "-", "-"],
    ]  # fmt: skip
    for label, run in (("1 rank", one), ("2 ranks", two)):
        s = run["summary"]
        rows.append([f"worker {label} x 1 thread, {scale_rows:,} synthetic rows: samples/s, comm share",
                     f"{s['samples_per_sec']:,.0f}", f"{one['summary']['samples_per_sec']:,.0f} (1 rank)",
                     f"{100 * s['comm_share']:.1f}% comm", "reported" if label == "2 ranks" else "-", "-"])  # fmt: skip
    worst = max(m["vmhwm"] for m in big["memory"])
    rows.append([f"peak resident memory per rank (VmHWM), 2 ranks, {memory_rows[0]:,} x {FEATURES:,} cache "
                 f"({memory_rows[0] * FEATURES * 4 / 1e9:.1f} GB train)",
                 " / ".join(f"{m['vmhwm'] / 1e9:.2f} GB" for m in big["memory"]),
                 f"train shard {shard / 1e9:.2f} GB (+ test part {test_part / 1e9:.2f} GB)",
                 f"{worst / shard:.2f}x shard ({worst / (shard + test_part):.2f}x shard + test part)",
                 "<= 1.5x shard", worst <= 1.5 * shard])  # fmt: skip
    rows.append(["start-up from the cache, 2 ranks: launch to exit minus the benchmark clock "
                 "(a later run / right after writing the cache)",
                 f"{big['wall'] - big['summary']['elapsed']:.1f} s",
                 f"{first['wall'] - first['summary']['elapsed']:.1f} s", "-", "seconds", "-"])  # fmt: skip
    for kind in ("plain", "bz2"):
        c = conversion[kind]
        rows.append([f"LIBSVM -> cache, {kind} text ({conversion['text_mb']:.0f} MB of dense rows)",
                     f"{c['text_mb_per_s']:.0f} MB/s", f"epsilon's 12 GB: ~{12e3 / c['text_mb_per_s'] / 60:.0f} min",
                     "-", "once per data set", "-"])  # fmt: skip
    cache = f"{memory_rows[0]:,}-row cache, a {shard / 1e9:.2f} GB train shard"
    write_results(
        "logreg",
        "Task 2 (logreg-epsilon): loop overhead, communication, memory per rank, conversion",
        ["measure", "ours", "reference", "ratio / share", "target", "met"],
        rows,
        {
            "loop": loop,
            "one_rank": one,
            "two_ranks": two,
            "memory_run": big,
            "cache_write_seconds": write_seconds,
            "conversion": conversion,
            "shard_bytes": shard,
            "test_part_bytes": test_part,
            "quick": args.quick,
        },  # fmt: skip
        ratios=ratios(loop, two, worst / shard, threads, cache),
    )


def ratios(loop: dict, two: dict, memory: float, threads: int, cache: str) -> list[dict]:
    """The run's ratios against their goals (common.ratio), each side by side in this run."""
    from common import ratio

    return [
        ratio(f"loop / plain PyTorch loop (autograd + SGD), samples/s, 1 rank x {threads} "
              "thread(s)", loop["ratio_plain"], ">= 0.95"),
        ratio("loop / a plain loop doing our closed-form step: what the bookkeeping costs",
              loop["ratio_closed"], ">= 0.95",
              "goal chosen here: task 2's loop goal, for the bookkeeping alone"),
        ratio("communication's share of the step, worker on 2 local ranks",
              two["summary"]["comm_share"], "<= 0.05",
              "goal chosen here: task 1a's (none stated for task 2)"),
        ratio("peak resident memory per rank / its train shard, 2 ranks", memory, "<= 1.5",
              cache),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
