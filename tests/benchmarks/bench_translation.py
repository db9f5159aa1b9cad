"""Benchmarks of task 4b (the Transformer on the generated parallel corpus), side by side.

1. Our training loop (the task's trainer) against a plain PyTorch loop of the same model
   on the same batches and recipe (label-smoothed loss, Adam at the same rate, on more than
   one rank the gradient summed by one mpi4py all-reduce of a flat buffer and divided by
   the ranks), on 1 and on 2 ranks (under mpirun, both loops in the same processes), the two
   loops taking turns round after round: target tokens per second of each and their ratio,
   by the wall clock (best rounds) and by the process's CPU time (medians; one thread each,
   so on a shared machine the CPU time counts the work each loop does). The small model
   always; the base model (63 million parameters at 37,000 sub-words) with --base, at a
   batch a CPU takes in seconds (it fits in memory; one step of 1,024 tokens is tens of
   seconds on one core).
2. The time to the generated corpus's light goal (BLEU 20): the small model on 2 ranks,
   4,000 generated pairs, 512 tokens a rank a step, the run's own clock.

Nothing is asserted; the numbers come from the trainers' clocks and the run's summary.
Usage: python tests/benchmarks/bench_translation.py [--quick] [--base]
       (under mpirun it is its own rank part: --part loops)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import (  # noqa: E402
    interleaved,
    launcher_prefix,
    machine,
    mpi_env,
    ratio,
    worker_summary,
    write_results,
)

PAIRS_PER_RANK = 3000


# --- 1. our loop against a plain one (every rank runs this) ---------------------------------------
def bench_loops(model_name: str, batch: int, steps: int, rounds: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from mlbench_worker.tasks.wmt import synthetic, tokens
    from mlbench_worker.tasks.wmt.data import PairBatches
    from mlbench_worker.tasks.wmt.setup import InverseSqrtSchedule, build_model
    from mlbench_worker.tasks.wmt.task import MT_MODELS
    from mlbench_worker.tasks.wmt.train import TranslationTrainer
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.recipe import Goal

    torch.set_num_threads(1)
    comm = Communicator("mpi")
    pairs = synthetic.generated_pairs(0, "train", PAIRS_PER_RANK * (comm.rank + 1))
    vocab = tokens.SYNTHETIC_VOCAB if model_name == "transformer-small" else tokens.REAL_VOCAB
    model_bytes = comm.bcast_object(
        tokens.train_model([s for p in pairs for s in p], tokens.SYNTHETIC_VOCAB)
        if comm.rank == 0 else None
    )  # fmt: skip
    shard = tokens.encode_pairs(tokens.processor(model_bytes), pairs[-PAIRS_PER_RANK:])
    data = PairBatches(shard, batch, torch.device("cpu"))
    spec = MT_MODELS[model_name]
    schedule = InverseSqrtSchedule(spec.peak_lr, spec.warmup_steps)

    def model_pair() -> tuple:
        torch.manual_seed(0)
        a = build_model(model_name, vocab)
        b = build_model(model_name, vocab)
        b.load_state_dict(a.state_dict())
        return a, b

    ours_model, plain_model = model_pair()
    adam = {"betas": (0.9, 0.98), "eps": 1e-9}
    opt = torch.optim.Adam(ours_model.parameters(), lr=spec.peak_lr, **adam)
    goal = Goal("never", 1e9, 10**6, metric="val_bleu", direction="up")
    trainer = TranslationTrainer(
        ours_model, opt, schedule, goal, comm, data, None, Reporter(), seed=0,
        device=torch.device("cpu"), log_every=10**9, print_fn=lambda _m: None,
        label_smoothing=0.1, sp_model=model_bytes, test_sources=[], references=[],
    )  # fmt: skip
    trainer.steps_per_epoch = min(trainer.steps_per_epoch, steps)
    trainer.clock_start = time.perf_counter()
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=spec.peak_lr, **adam)
    params = list(plain_model.parameters())
    flat = torch.zeros(sum(p.numel() for p in params))
    epoch, plain_epoch, plain_step = [0], [0], [0]

    def ours() -> tuple[float, float]:
        before = trainer.progress.images
        start, cpu = time.perf_counter(), time.process_time()
        trainer.train_one_epoch(epoch[0])
        epoch[0] += 1
        return rates(trainer.progress.images - before, start, cpu)

    def plain() -> tuple[float, float]:
        order = np.random.default_rng([0, plain_epoch[0], comm.rank]).permutation(len(data))
        plain_epoch[0] += 1
        start, cpu, n = time.perf_counter(), time.process_time(), 0
        for i, ((source, decoder_in), y) in enumerate(data.iterate(order)):
            if i == steps:
                break
            plain_opt.zero_grad()
            logits = plain_model(source, decoder_in)[decoder_in != tokens.PAD]
            F.cross_entropy(logits, y, label_smoothing=0.1).backward()
            if comm.size > 1:
                torch.cat([p.grad.reshape(-1) for p in params], out=flat)
                comm.world.Allreduce(comm.MPI.IN_PLACE, flat.numpy(), op=comm.MPI.SUM)
                flat.div_(comm.size)
                at = 0
                for p in params:
                    p.grad.copy_(flat[at : at + p.numel()].view_as(p))
                    at += p.numel()
            for group in plain_opt.param_groups:
                group["lr"] = schedule(plain_step[0])
            plain_opt.step()
            plain_step[0] += 1
            n += int(y.shape[0])
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        total = comm.world.allreduce(n)  # the tokens of all ranks, once, off the clock
        return total / wall, total / used

    a, b = interleaved(ours, plain, rounds)
    rank = comm.rank
    comm.close()
    wall_a, cpu_a = [r[0] for r in a], [r[1] for r in a]
    wall_b, cpu_b = [r[0] for r in b], [r[1] for r in b]
    return {"model": model_name, "batch": batch, "steps": steps, "ranks": comm.size, "rank": rank,
            "ours": wall_a, "plain": wall_b, "ratio": max(wall_a) / max(wall_b),
            "ours_cpu": cpu_a, "plain_cpu": cpu_b,
            "cpu_ratio": statistics.median(cpu_a) / statistics.median(cpu_b)}  # fmt: skip


def rates(tokens: int, start: float, cpu: float) -> tuple[float, float]:
    """Target tokens (all ranks) per second of wall clock and of this process's CPU time."""
    return tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu)


def loops_on(ranks: int, model: str, batch: int, steps: int, rounds: int) -> dict:
    """bench_loops on `ranks` ranks under mpirun; rank 0's result."""
    argv = [*launcher_prefix(ranks), sys.executable, __file__, "--part", "loops", "--model",
            model, "--batch", str(batch), "--steps", str(steps), "--rounds", str(rounds)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=mpi_env(OMP_NUM_THREADS="1"),
                          timeout=7200)  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


# --- 2. time to the light goal -------------------------------------------------------------------
def time_to_light(home: Path) -> dict:
    metrics = home / "light.jsonl"
    argv = [*launcher_prefix(2), sys.executable, "-m", "mlbench_worker", "transformer-wmt17",
            "--model", "transformer-small", "--dataset", "synthetic", "--train-samples", "4000",
            "--test-samples", "64", "--batch-size", "512", "--threads", "1", "--max-epochs",
            "8", "--target", "light", "--metrics-file", str(metrics), "--log-every", "20"]  # fmt: skip
    return worker_summary(argv, home, metrics, timeout=3600)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--base", action="store_true", help="also the base model's loops")
    parser.add_argument("--part", choices=["loops"], help=argparse.SUPPRESS)
    parser.add_argument("--model", default="transformer-small", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1024, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part == "loops":
        r = bench_loops(args.model, args.batch, args.steps, args.rounds)
        if r["rank"] == 0:
            print("RESULT " + json.dumps(r), flush=True)
        return 0
    rows: list[list] = []
    ratios: list[dict] = []
    data: dict = {"machine": machine(), "loops": {}, "light": None}
    steps, rounds = (4, 2) if args.quick else (8, 3)
    cases = [("transformer-small", 1024, steps, rounds)]
    if args.base:
        cases.append(("transformer-base", 256, 2, 2))
    for model, batch, n, r in cases:
        for ranks in (1, 2):
            got = loops_on(ranks, model, batch, n, r)
            data["loops"][f"{model}@{ranks}"] = got
            ratios.append(ratio(
                f"task 4b {model} loop / plain PyTorch loop, {ranks} rank(s) (tokens per CPU "
                "second, 1 thread)", got["cpu_ratio"], ">= 0.97",
                f"by the wall clock {got['ratio']:.3f}",
            ))  # fmt: skip
            rows.append([
                f"{model}, {ranks} rank(s), {batch} tokens/rank/step",
                f"{max(got['ours']):.0f} vs {max(got['plain']):.0f} tokens/s",
                f"ratio {got['ratio']:.2f} (wall), {got['cpu_ratio']:.2f} (CPU time)",
            ])  # fmt: skip
    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-translation-"))
    s = time_to_light(home)
    data["light"] = s
    rows.append([
        "transformer-small, 2 ranks, generated corpus, light goal (BLEU 20)",
        f"{s.get('tokens_per_sec') or 0:.0f} tokens/s",
        f"time to target {s.get('time_to_target')} s, final BLEU "
        f"{s.get('final_val_bleu') or 0:.1f} after {s.get('epochs')} epochs",
    ])  # fmt: skip
    write_results(
        "translation", "Task 4b: our loop against a plain one, and the time to the light goal",
        ["run", "speed (ours vs plain)", "ratio / result"], rows, data, ratios=ratios,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
