"""Benchmarks of the training worker (issue 2), measured side by side in one run.

1. Our 1-rank training loop vs a plain PyTorch loop (same model, batch, threads): images/s.
2. Our gradient aggregation vs raw mpi4py Allreduce on one buffer vs torch gloo, 2 ranks,
   at ResNet-20's gradient size (~1 MB), 10 MB and 100 MB. The script starts mpirun itself.
3. The real worker with 1 rank vs 2 ranks: images/s and communication's share of the step.

Nothing is asserted; each target is printed next to its measurement.
Usage: python tests/benchmarks/bench_worker.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import interleaved, launcher_prefix, mpi_env, plain_loop  # noqa: E402

SIZES_MB = {"1 MB (ResNet-20 grads)": None, "10 MB": 10, "100 MB": 100}


# --- 1. loop overhead --------------------------------------------------------------------
def bench_loop(threads: int, steps: int, rounds: int) -> dict:
    import torch

    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.models import build_model
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    torch.set_num_threads(threads)
    batch = 128
    data = generate(0, batch * steps, 100)
    mean, std = channel_stats(data.train_x)
    comm = Communicator("mpi")

    torch.manual_seed(0)
    model = build_model("resnet20")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    trainer = Trainer(
        model, optimizer, Schedule(0.1, 0.1, 0, (), 1.0), Goal("paper", 0.91, 1), comm,
        Batches(data.train_x, data.train_y, batch, mean, std),
        Batches(data.test_x, data.test_y, 100, mean, std, augment=False),
        Reporter(), seed=0, device=torch.device("cpu"), log_every=10**9,
        print_fn=lambda _m: None,
    )  # fmt: skip
    trainer.clock_start = time.perf_counter()

    torch.manual_seed(0)
    plain_model = build_model("resnet20")
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    # The plain loop gets its batches ready-made in memory: no augmentation, no timing.
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, 3, 32, 32, generator=g) for _ in range(steps)]
    ys = [torch.randint(0, 10, (batch,), generator=g) for _ in range(steps)]

    def ours() -> float:
        start = time.perf_counter()
        trainer.train_one_epoch(0)
        return batch * steps / (time.perf_counter() - start)

    a, b = interleaved(ours, plain_loop(plain_model, plain_opt, xs, ys), rounds)
    return {
        "threads": threads,
        "ours": a,
        "plain": b,
        # Best round of each: on a shared machine the least disturbed by other load.
        "ratio": max(a) / max(b),
    }


# --- 2. aggregation (runs inside mpirun -n 2) ----------------------------------------------
def allreduce_child(repeats: int) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from mlbench_worker.models import build_model
    from mlbench_worker.training.comm import Communicator, FlatGradients

    torch.set_num_threads(1)
    ours_comm = Communicator("mpi")
    gloo_comm = Communicator("gloo")  # a torch.distributed gloo group, same rendezvous
    world = MPI.COMM_WORLD
    results = {}
    for label, mb in SIZES_MB.items():
        if mb is None:
            grads = FlatGradients(list(build_model("resnet20").parameters()))
        else:
            grads = FlatGradients([torch.nn.Parameter(torch.zeros(mb * 2**20 // 4))])
        grads.buffer.normal_()
        raw = np.random.default_rng(0).standard_normal(grads.buffer.numel()).astype(np.float32)
        gloo_t = torch.randn(grads.buffer.numel())

        def t_ours(grads: FlatGradients = grads) -> None:
            grads.allreduce_average_(ours_comm, prescaled=True)  # as the trainer calls it

        def t_raw(raw: np.ndarray = raw) -> None:
            world.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)

        def t_gloo(gloo_t: torch.Tensor = gloo_t) -> None:
            dist.all_reduce(gloo_t)

        times = {"ours": [], "mpi4py": [], "gloo": []}
        n = repeats if (mb or 1) < 50 else max(5, repeats // 10)
        for _ in range(3):  # warm-up
            t_ours(), t_raw(), t_gloo()
        order = [("ours", t_ours), ("mpi4py", t_raw), ("gloo", t_gloo)]
        for i in range(n):
            for name, fn in order[i % 3 :] + order[: i % 3]:  # rotated: no one always goes first
                world.Barrier()
                start = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - start
                # The slower rank decides when the collective is done for everyone.
                times[name].append(world.allreduce(elapsed, op=MPI.MAX))
        # Best of n: on a shared machine the minimum is the least disturbed by other load;
        # the medians go to the JSON too.
        results[label] = {
            "bytes": grads.buffer.numel() * 4,
            "repeats": n,
            **{k: min(v) for k, v in times.items()},
            **{f"{k}_median": statistics.median(v) for k, v in times.items()},
        }
    if world.Get_rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)
    gloo_comm.close()


def bench_allreduce(repeats: int) -> dict:
    cmd = [
        *launcher_prefix(2),
        sys.executable,
        __file__,
        "--allreduce-child",
        "--repeats",
        str(repeats),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=mpi_env(OMP_NUM_THREADS="1"), timeout=900
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


# --- 3. scaling of the real worker ------------------------------------------------------
def run_worker(ranks: int, threads: int, images: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.jsonl"
        args = [sys.executable, "-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
                "--train-images", str(images), "--test-images", "200", "--max-epochs", "1",
                "--threads", str(threads), "--log-every", "1000", "--metrics-file", str(out)]  # fmt: skip
        if ranks > 1:
            args = [*launcher_prefix(ranks), *args]
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            env=mpi_env(OMP_NUM_THREADS=str(threads)),
            timeout=900,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
        summary = next(json.loads(x) for x in out.read_text().splitlines() if '"summary"' in x)
    return {
        "ranks": ranks,
        "threads": threads,
        "images_per_sec": summary["images_per_sec"],
        "comm_share": summary["comm_share"],
    }


def main() -> None:
    from common import write_results

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--allreduce-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args()
    if args.allreduce_child:
        allreduce_child(args.repeats)
        return

    cores = os.cpu_count() or 1
    # Half the cores at most: two threads on a 2-core machine that others also use are
    # stalled by every other process, and the comparison drowns in noise.
    threads = max(1, min(4, cores // 2))
    steps, rounds, repeats, images = (4, 3, 10, 1280) if args.quick else (5, 6, 40, 2560)
    print(
        f"[1/3] training loop, {threads} threads, {rounds} rounds of {steps} steps ...", flush=True
    )
    loop = bench_loop(threads, steps, rounds)
    print("[2/3] gradient aggregation, 2 ranks ...", flush=True)
    agg = bench_allreduce(repeats)
    print("[3/3] worker scaling, 1 vs 2 ranks ...", flush=True)
    scaling = [run_worker(1, 1, images), run_worker(1, 2, images), run_worker(2, 1, images)]

    rows = [
        [f"loop: ours vs plain PyTorch (img/s, 1 rank x {threads} thread(s), best of {rounds})",
         f"{max(loop['ours']):.1f}", f"{max(loop['plain']):.1f}",
         f"{loop['ratio']:.3f}", ">= 0.97", loop["ratio"] >= 0.97],
    ]  # fmt: skip
    for label, r in agg.items():
        # "best / median" in ms; the verdict uses the best (least disturbed by other load).
        def ms(key: str, r: dict = r) -> str:
            return f"{1e3 * r[key]:.3f} / {1e3 * r[key + '_median']:.3f}"

        rows.append([f"all-reduce {label}: ours vs raw mpi4py (ms, best / median of {r['repeats']})",
                     ms("ours"), ms("mpi4py"), f"{r['ours'] / r['mpi4py']:.2f}x (median {r['ours_median'] / r['mpi4py_median']:.2f}x)",
                     "<= 1.1x", r["ours"] <= 1.1 * r["mpi4py"]])  # fmt: skip
        first = label.startswith("1 MB")
        rows.append([f"all-reduce {label}: ours vs torch gloo (ms, best / median of {r['repeats']})",
                     ms("ours"), ms("gloo"), f"{r['gloo'] / r['ours']:.1f}x faster (median {r['gloo_median'] / r['ours_median']:.1f}x)",
                     ">= 5x faster" if first else "-", (r["gloo"] / r["ours"] >= 5) if first else "-"])  # fmt: skip
    one = scaling[0]
    for s in scaling:
        rows.append([f"worker {s['ranks']} rank(s) x {s['threads']} thread(s): img/s, comm share",
                     f"{s['images_per_sec']:.1f}", f"{one['images_per_sec']:.1f} (1x1)",
                     f"{100 * s['comm_share']:.1f}% comm", "<= 5% comm (2 ranks)" if s["ranks"] > 1 else "-",
                     (s["comm_share"] <= 0.05) if s["ranks"] > 1 else "-"])  # fmt: skip
    write_results(
        "worker",
        "Training worker: loop overhead, gradient aggregation, scaling",
        ["measure", "ours", "reference", "ratio / share", "target", "met"],
        rows,
        {"loop": loop, "allreduce": agg, "scaling": scaling, "quick": args.quick},
        ratios=ratios(loop, agg, scaling, threads),
    )


def ratios(loop: dict, agg: dict, scaling: list[dict], threads: int) -> list[dict]:
    """The run's ratios against their goals (common.ratio), each of contenders measured
    side by side: best rounds, as the table's verdicts."""
    from common import ratio

    out = [
        ratio(f"1-rank loop / plain PyTorch loop, images/s (ResNet-20, {threads} thread(s))",
              loop["ratio"], ">= 0.97"),
    ]  # fmt: skip
    for label, r in agg.items():
        out.append(ratio(f"all-reduce {label}: ours / raw mpi4py Allreduce, time (best)",
                         r["ours"] / r["mpi4py"], "<= 1.1",
                         f"median {r['ours_median'] / r['mpi4py_median']:.2f}"))  # fmt: skip
    first = next(iter(agg.values()))
    out.append(ratio("all-reduce 1 MB: torch gloo / ours, time (best): how many times faster",
                     first["gloo"] / first["ours"], ">= 5",
                     f"median {first['gloo_median'] / first['ours_median']:.1f}"))  # fmt: skip
    two = next(s for s in scaling if s["ranks"] > 1)
    out.append(ratio("communication's share of the step, worker on 2 local ranks",
                     two["comm_share"], "<= 0.05"))  # fmt: skip
    return out


if __name__ == "__main__":
    main()
