"""One benchmark run on one rank: set up, train (train.py), summarise, report.

Each kind of task builds its own data, model and trainer (`_build_images` for task 1a,
`_build_imagenet` for task 1b with mlbench_worker/imagenet/, `_build_linear` for task 2
with mlbench_worker/linear/); checkpoints, the headline, the clock, the summary and
reporting are the same code for all.

Errors a user can fix are raised on every rank together (they come from agreed decisions)
and printed once by rank 0; anything unexpected prints its traceback and aborts the whole
MPI job, so no rank is left waiting in a collective for a partner that died.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mlbench_worker import checkpoint, runinfo
from mlbench_worker.comm import Communicator, broadcast_model, local_rank
from mlbench_worker.data import load_dataset
from mlbench_worker.data.loader import CIFAR10_MEAN, CIFAR10_STD, Batches, channel_stats
from mlbench_worker.errors import WorkerError
from mlbench_worker.imagenet import setup as imagenet_setup
from mlbench_worker.linear import setup as linear_setup
from mlbench_worker.models import build_model
from mlbench_worker.report import Reporter, make_reporter
from mlbench_worker.tasks import ImageNetTask, LinearTask, Task, get_task
from mlbench_worker.train import Goal, Schedule, Trainer, momentum_sgd

EVAL_BATCH = 500


def pick_device(requested: str) -> torch.device:
    """cpu, or this rank's GPU (ranks on one machine take GPUs round-robin)."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise WorkerError(
            "--device cuda: no CUDA device is visible (torch.cuda.is_available() is False); "
            "use --device cpu"
        )
    index = local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def default_threads() -> int:
    """Cores this rank may use: its CPU binding, or this machine's cores shared by its ranks.

    torch would otherwise start one thread per core in every rank, and ranks on one machine
    would fight over the same cores (or, bound to one core, run several threads on it).
    """
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    allowed = allowed or 1
    if allowed < (os.cpu_count() or 1):  # mpirun bound this rank: use what it was given
        return allowed
    local_ranks = int(
        os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("MPI_LOCALNRANKS") or 1
    )
    return max(1, allowed // max(1, local_ranks))


def run_main(args: argparse.Namespace) -> int:
    """Entry point after option parsing; returns the process exit code."""
    comm: Communicator | None = None
    try:
        torch.set_num_threads(args.threads or default_threads())
        comm = Communicator(args.backend, device=pick_device(args.device))
        return _run(args, comm)
    except WorkerError as exc:
        if comm is None or comm.rank == 0:
            print(f"mlbench-worker: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        if comm is not None and comm.size > 1:
            comm.world.Abort(1)
        return 1
    finally:
        if comm is not None:
            comm.close()


@dataclass
class Built:
    """What a task's set-up hands to the part of a run every task shares."""

    trainer: Trainer
    dataset: str  # what was used: the real data set's name, or "synthetic"
    note: str  # why synthetic was used, when it was a fallback
    real_name: str  # the real data set as people call it, for the synthetic banner
    peak_lr: float
    data_line: str  # e.g. "data cifar10 (50000 train / 10000 test images)"
    config: dict  # task-specific entries of the summary's config
    after_restore: Callable[[Trainer], None] = lambda _trainer: None
    # Task-specific results for the summary, and lines printed under its table.
    results: Callable[[Trainer], dict] = lambda _trainer: {}
    footer: Callable[[dict], str] = lambda _summary: ""


def _run(args: argparse.Namespace, comm: Communicator) -> int:
    task = get_task(args.task)
    rank0 = comm.rank == 0
    say = print if rank0 else (lambda *_a, **_k: None)
    threads = torch.get_num_threads()
    hostnames = comm.allgather_object(runinfo.hostname())

    def open_reporter() -> Reporter:
        if rank0:
            return make_reporter(args.master_url, args.run_id, args.token, args.metrics_file)
        return make_reporter(None, args.run_id, None, None)

    build = {"linear": _build_linear, "imagenet": _build_imagenet}.get(task.kind, _build_images)
    built = build(args, comm, task, say, open_reporter)
    built.trainer.set_overlap(not args.no_overlap, args.bucket_mb)
    trainer, reporter, device = built.trainer, built.trainer.reporter, comm.device
    workers = comm.size
    goal = trainer.goal

    identity = {
        "task": task.name,
        "model": args.model,
        "num_workers": workers,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "dataset": built.dataset,
    }
    if args.checkpoint_dir:

        def save(trainer: Trainer) -> None:
            if trainer.comm.rank == 0:
                checkpoint.save(trainer, args.checkpoint_dir, identity)

        trainer.checkpoint = save

    if args.resume:
        state, problem = None, None
        if rank0:
            try:
                state = checkpoint.load(args.checkpoint_dir, identity)
            except WorkerError as exc:
                problem = str(exc)
        problem = comm.bcast_object(problem)
        if problem:
            raise WorkerError(problem)
        state = comm.bcast_object(state)
        checkpoint.restore(trainer, state)
        built.after_restore(trainer)
        say(
            f"resumed from {args.checkpoint_dir}: {trainer.progress.epoch} epochs done, "
            f"{trainer.progress.elapsed_before:.1f}s on the clock",
            flush=True,
        )

    say(
        f"{task.name}: model {args.model}, {built.data_line}, "
        f"{workers} worker(s), backend {comm.backend}, device {device}, {threads} thread(s)/rank, "
        f"batch {args.batch_size}/worker, peak lr {built.peak_lr:g}, target {args.target} "
        f"({goal.accuracy:.0%}), max {goal.max_epochs} epochs"
        + (f", time budget {args.time_budget:g}s" if args.time_budget else ""),
        flush=True,
    )

    try:
        progress = trainer.fit()
        elapsed = trainer.elapsed()
        totals = comm.allreduce_sums(
            [
                progress.time_data,
                progress.time_compute,
                progress.time_comm,
                progress.time_comm_total,
            ]
        )
        step_total = float(totals[:3].sum())
        summary = {
            "task": task.name,
            "model": args.model,
            "dataset": built.dataset,
            "num_workers": workers,
            "backend": comm.backend,
            "device": str(device),
            "target": args.target,
            "target_accuracy": goal.accuracy,
            "reached": progress.time_to_target is not None,
            "time_to_target": progress.time_to_target,
            "final_val_accuracy": progress.val_accuracy,
            "best_val_accuracy": progress.best_val_accuracy,
            "epochs": round(progress.epochs_done, 4),
            trainer.throughput_metric: _finite(trainer.throughput()),
            "comm_share": float(totals[2] / step_total) if step_total > 0 else 0.0,
            "comm_share_total": float(totals[3] / step_total) if step_total > 0 else 0.0,
            "elapsed": elapsed,
            "seed": args.seed,
            "versions": runinfo.versions(),
            "hardware": runinfo.hardware(device, threads, hostnames),
            "stop_reason": progress.stop_reason,
            "run_id": args.run_id,
            "dataset_note": built.note,
            **built.results(trainer),
            "config": {
                "batch_size": args.batch_size,
                "peak_lr": built.peak_lr,
                "max_epochs": args.max_epochs,
                "time_budget": args.time_budget,
                **built.config,
                **trainer.allreduce_config(),
                "threads": threads,
            },
        }
        if rank0:
            reporter.summary(summary)
            print(runinfo.summary_table(summary), flush=True)
            if footer := built.footer(summary):
                print(footer, flush=True)
    finally:
        reporter.close()
    return 0


def _synthetic_banner(say: Callable[..., None], real_name: str, note: str) -> None:
    banner = "!" * 78
    why = note or "--dataset synthetic was requested."
    say(
        f"{banner}\n!! SYNTHETIC DATA: this run does not train on {real_name} and its results are\n"
        f"!! not {real_name} results. {why}\n{banner}",
        flush=True,
    )


def _build_images(
    args: argparse.Namespace,
    comm: Communicator,
    task: Task,
    say: Callable[..., None],
    open_reporter: Callable[[], Reporter],
) -> Built:
    """Task 1a: CIFAR-10 (or its stand-in), a ResNet, SGD with momentum, warm-up and decay."""
    device = comm.device
    data = load_dataset(
        args.dataset, args.data_dir, args.seed, comm, args.train_images, args.test_images
    )
    if data.name == "synthetic":
        _synthetic_banner(say, "CIFAR-10", data.note)
    arrays = data.arrays
    mean, std = (
        (CIFAR10_MEAN, CIFAR10_STD) if data.name == "cifar10" else channel_stats(arrays.train_x)
    )
    train_data = Batches(
        arrays.train_x,
        arrays.train_y,
        args.batch_size,
        mean,
        std,
        device,
        args.channels_last,
        augment=True,
    )
    test_data = Batches(
        arrays.test_x,
        arrays.test_y,
        EVAL_BATCH,
        mean,
        std,
        device,
        args.channels_last,
        augment=False,
    )

    torch.manual_seed(args.seed)
    model = build_model(args.model).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    broadcast_model(model, comm)

    optimizer, start_lr, peak_lr = momentum_sgd(model, task, args.batch_size, comm.size, args.lr)
    goal = Goal(args.target, task.target_accuracy(args.target), args.max_epochs, args.time_budget)
    trainer = Trainer(
        model,
        optimizer,
        _placeholder_schedule(),
        goal,
        comm,
        train_data,
        test_data,
        open_reporter(),
        seed=args.seed,
        device=device,
        amp=args.amp,
        log_every=args.log_every,
    )
    steps = trainer.steps_per_epoch
    trainer.schedule = Schedule(
        start_lr=start_lr,
        peak_lr=peak_lr,
        warmup_steps=round(task.warmup_epochs * steps),
        decay_steps=tuple(round(e * steps) for e in task.decay_epochs),
        factor=task.decay_factor,
    )
    return Built(
        trainer=trainer,
        dataset=data.name,
        note=data.note,
        real_name="CIFAR-10",
        peak_lr=peak_lr,
        data_line=f"data {data.name} ({len(train_data)} train / {len(test_data)} test images)",
        config={
            "train_images": len(train_data),
            "test_images": len(test_data),
            "amp": args.amp,
            "channels_last": args.channels_last,
        },
    )


def _build_imagenet(
    args: argparse.Namespace,
    comm: Communicator,
    task: ImageNetTask,
    say: Callable[..., None],
    open_reporter: Callable[[], Reporter],
) -> Built:
    """Task 1b: ImageNet JPEG files (or the synthetic ones), a ResNet, SGD as Goyal et al."""
    s = imagenet_setup.build(args, comm, task, lambda msg: say(msg, flush=True), open_reporter)
    if s.data.name == "synthetic":
        _synthetic_banner(say, "ImageNet", s.data.note)
    if s.config["smoke_test_crop"]:
        say(
            f"SMOKE TEST: {s.config['crop']}-pixel crops instead of the benchmark's 224 "
            "(--crop); the accuracy is not comparable with 224-pixel results",
            flush=True,
        )

    def results(trainer: Trainer) -> dict:
        return {"final_val_top5_accuracy": getattr(trainer, "val_top5", None)}

    def footer(summary: dict) -> str:
        top5 = summary.get("final_val_top5_accuracy")
        lines = [f"final val top-5 accuracy: {'-' if top5 is None else f'{top5:.4g}'}"]
        if summary["config"].get("smoke_test_crop"):
            lines.append(f"SMOKE TEST crop {summary['config']['crop']} px (the benchmark's: 224)")
        return "\n".join(lines)

    return Built(
        trainer=s.trainer,
        dataset=s.data.name,
        note=s.data.note,
        real_name="ImageNet",
        peak_lr=s.peak_lr,
        data_line=(
            f"data {s.data.name} ({len(s.train_data)} train / {len(s.test_data)} val images "
            f"in {s.train_data.folder.parent}, {s.config['data_workers']} loader process(es)"
            f"/rank, crop {s.config['crop']}, lr schedule {s.config['lr_schedule']})"
        ),
        config=s.config,
        results=results,
        footer=footer,
    )


def _build_linear(
    args: argparse.Namespace,
    comm: Communicator,
    task: LinearTask,
    say: Callable[..., None],
    open_reporter: Callable[[], Reporter],
) -> Built:
    """Task 2: epsilon (or its stand-in), a GLM, plain SGD with a plateau schedule."""
    s = linear_setup.build(args, comm, task, lambda msg: say(msg, flush=True), open_reporter)
    data = s.data
    if data.name == "synthetic":
        _synthetic_banner(say, "epsilon", data.note)
    return Built(
        trainer=s.trainer,
        dataset=data.name,
        note=data.note,
        real_name="epsilon",
        peak_lr=s.peak_lr,
        data_line=(
            f"data {data.name} ({data.train_total} train / {data.test_total} test samples, "
            f"{data.features} features; {len(data.train)} rows on this rank)"
        ),
        config={
            "train_samples": data.train_total,
            "test_samples": data.test_total,
            "features": data.features,
            "l2": s.l2,
            "floor_lr": s.floor_lr,
        },
        after_restore=lambda t: t.schedule.replay(t.progress.history),
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _placeholder_schedule() -> Schedule:
    return Schedule(0.0, 0.0, 0, (), 1.0)
