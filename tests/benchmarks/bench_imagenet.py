"""Benchmarks of task 1b (ResNet on ImageNet), measured side by side in one run.

1. The data pipeline alone, one process (one core): images/s of decoding synthetic
   ImageNet-shaped JPEG files and augmenting them (training: random-resized crop 224 and
   flip; evaluation: resize 256 and centre crop 224).
2. The model alone: images/s of a full ResNet training step (forward, backward, SGD) on
   ready-made batches, with the threads of a rank. Beside 1., it says how many decoding
   cores keep the model busy: on a GPU, the number that decides the loader processes.
3. Our loop (ImageNetTrainer reading the JPEG files through the pipeline with one loader
   process) vs a plain PyTorch loop over ready-made batches, same model and batch:
   images/s, target >= 0.97.

Nothing is asserted; each target is printed next to its measurement.
Usage: python tests/benchmarks/bench_imagenet.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))


def bench_pipeline(data_dir: Path, images: int, crop: int) -> dict:
    """Images/s of decode + augment in this process (one core), training and evaluation."""
    import numpy as np
    import torch

    from mlbench_worker.tasks.imagenet import synthetic
    from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
    from mlbench_worker.tasks.imagenet.setup import eval_resize

    split = synthetic.split(data_dir, "train", images)
    out = {}
    for label, train in (("train", True), ("eval", False)):
        data = ImageBatches(split, 32, train=train, crop=crop, resize=eval_resize(crop))
        gen = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        for _ in data.iterate(np.arange(images), gen):
            pass
        out[label] = images / (time.perf_counter() - start)
    sizes = [(split.folder / n.decode()).stat().st_size for n in split.names]
    out["mean_file_kb"] = sum(sizes) / len(sizes) / 1000
    return out


def bench_loop(
    data_dir: Path, model_name: str, threads: int, batch: int, crop: int, steps: int, rounds: int
) -> dict:
    import torch
    from common import interleaved, plain_loop

    from mlbench_worker.models import build_imagenet_model
    from mlbench_worker.tasks.imagenet import synthetic
    from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
    from mlbench_worker.tasks.imagenet.setup import eval_resize
    from mlbench_worker.tasks.imagenet.train import ImageNetTrainer
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule

    torch.set_num_threads(threads)
    comm = Communicator("mpi")
    train = synthetic.split(data_dir, "train", batch * steps)
    val = synthetic.split(data_dir, "val", batch)

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    torch.manual_seed(0)
    model = build_imagenet_model(model_name, zero_init_residual=True)
    common = {"crop": crop, "resize": eval_resize(crop), "workers": 1}
    trainer = ImageNetTrainer(
        model, sgd(model), Schedule(0.1, 0.1, 0, (), 1.0), Goal("standard", 0.759, 1), comm,
        ImageBatches(train, batch, train=True, **common),
        ImageBatches(val, batch, train=False, **common),
        Reporter(), task=f"{model_name}-imagenet", seed=0, device=torch.device("cpu"),
        log_every=10**9, print_fn=lambda _m: None,
    )  # fmt: skip
    trainer.clock_start = time.perf_counter()

    torch.manual_seed(0)
    plain_model = build_imagenet_model(model_name, zero_init_residual=True)
    plain_opt = sgd(plain_model)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, 3, crop, crop, generator=g) for _ in range(steps)]
    ys = [torch.randint(0, 1000, (batch,), generator=g) for _ in range(steps)]

    def ours() -> float:
        start = time.perf_counter()
        trainer.train_one_epoch(0)
        return batch * steps / (time.perf_counter() - start)

    a, b = interleaved(ours, plain_loop(plain_model, plain_opt, xs, ys), rounds)
    p = trainer.progress
    return {
        "model": model_name,
        "threads": threads,
        "batch": batch,
        "crop": crop,
        "ours": a,
        "plain": b,
        "ratio": max(a) / max(b),  # best round of each: the least disturbed by other load
        "data_share": p.time_data / max(1e-9, p.time_data + p.time_compute + p.time_comm),
    }


def main() -> None:
    from common import write_results

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller crops, fewer steps")
    parser.add_argument("--model", default="resnet50")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    threads = max(1, min(4, cores // 2))  # as bench_worker.py: half the cores at most
    crop, batch, steps, rounds, images = (
        (128, 8, 4, 7, 256) if args.quick else (224, 16, 4, 5, 1024)
    )
    from mlbench_worker.tasks.imagenet import synthetic

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        synthetic.ensure(data_dir, max(images, batch * steps), batch, say=print)
        print(f"[1/2] data pipeline, 1 process, {images} images ...", flush=True)
        pipe = bench_pipeline(data_dir, images, crop)
        print(f"[2/2] {args.model}: ours vs plain, {threads} thread(s), batch {batch}, "
              f"crop {crop}, {rounds} rounds of {steps} steps ...", flush=True)  # fmt: skip
        loop = bench_loop(data_dir, args.model, threads, batch, crop, steps, rounds)

    model_rate = max(loop["plain"])
    rows = [
        [f"data pipeline, training (decode + random-resized crop {crop} + flip), 1 core",
         f"{pipe['train']:.0f} img/s", "-", "-"],
        [f"data pipeline, evaluation (decode + resize + centre crop {crop}), 1 core",
         f"{pipe['eval']:.0f} img/s", "-", "-"],
        [f"{args.model} training step alone (CPU, {threads} thread(s), batch {batch}, {crop} px)",
         f"{model_rate:.1f} img/s", "-", "-"],
        ["decoding cores that keep that model busy",
         f"{model_rate / pipe['train']:.3f}", "-", "< 1: the model limits"],
        [f"our loop vs a plain PyTorch loop ({args.model}, best of {rounds})",
         f"{max(loop['ours']):.2f} vs {model_rate:.2f} img/s", f"{loop['ratio']:.3f}", ">= 0.97"],
        ["data share of our loop's step time (waiting for the loader)",
         f"{100 * loop['data_share']:.1f} %", "-", "-"],
    ]  # fmt: skip
    write_results(
        "imagenet",
        "Task 1b (ResNet, ImageNet): data pipeline vs model, loop overhead (CPU)",
        ["measure", "result", "ratio", "target"],
        rows,
        {"pipeline": pipe, "loop": loop, "quick": args.quick, "synthetic_files": True},
        ratios=ratios(args.model, pipe, loop, model_rate),
    )


def ratios(model: str, pipe: dict, loop: dict, model_rate: float) -> list[dict]:
    """The run's ratios against their goals (common.ratio), measured side by side here."""
    from common import ratio

    return [
        ratio(f"loop (JPEG files, 1 loader process) / plain PyTorch loop, images/s ({model}, "
              f"{loop['crop']} px)", loop["ratio"], ">= 0.97"),
        ratio(f"{model} step alone / one core's training pipeline, images/s: the decoding "
              "cores the model needs", model_rate / pipe["train"], "<= 1",
              "one loader process keeps a CPU rank's model busy"),
        ratio("the loop's wait for the loader, share of its step", loop["data_share"], "<= 0.05",
              "goal chosen here, as task 1a's communication share"),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
