"""One task-1b run's pieces on one rank: data, model, optimizer, schedule, trainer.

The learning rate is the task's rate for its batch times B / (the task's batch) for B
images per worker, times K workers (linear scaling: 0.1 x 256K / 256 at the defaults),
reached by a linear warm-up over the task's warm-up epochs from the one-worker rate, then
step or cosine decay, or MLPerf's polynomial schedule with its warm-up from 0
(task.py). `--lr` replaces the peak. The summary's config records the
momentum, the weight decay and the schedule's own parameters, which the run's MLPerf log
states.

Loader processes per rank (`--data-workers`, default): on CUDA every core the rank has,
since the GPU does the arithmetic and decoding JPEG files is the CPU's whole job; on CPU
half of them (at least one), since the same cores also run the model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mlbench_worker.data.images import epoch_steps
from mlbench_worker.models import build_imagenet_model
from mlbench_worker.shared.imagenet_rules import eval_resize  # the evaluator's rule too
from mlbench_worker.tasks.imagenet import CROP, NUM_CLASSES
from mlbench_worker.tasks.imagenet.data import load
from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
from mlbench_worker.tasks.imagenet.task import ImageNetTask
from mlbench_worker.tasks.imagenet.train import CosineSchedule, ImageNetTrainer, poly_schedule
from mlbench_worker.training.build import Built, Say, goal, place_model, synthetic_banner
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.recipe import Schedule, momentum_sgd
from mlbench_worker.training.trainer import Trainer

EVAL_BATCH = 250  # 50,000 validation images: 200 batches, split over the ranks


def data_workers(requested: int | None, device: torch.device, threads: int) -> int:
    """Loader processes for this rank (see the module docstring)."""
    if requested is not None:
        return requested
    return threads if device.type == "cuda" else max(1, threads // 2)


def build(
    config: RunConfig,
    comm: Communicator,
    task: ImageNetTask,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """ImageNet JPEG files (or the synthetic ones), a ResNet, SGD as Goyal et al."""
    device = comm.device
    if config.amp and config.amp_dtype == "float16" and device.type != "cuda":
        raise WorkerError(
            f"--amp-dtype float16 needs a CUDA device (this rank has {device}); use bfloat16"
        )
    data = load(config.dataset, config.data_dir, comm, config.train_images, config.test_images, say)
    crop = config.crop or CROP
    resize = eval_resize(crop)
    workers = data_workers(config.data_workers, device, torch.get_num_threads())
    listing = data.listing
    common = {"device": device, "channels_last": config.channels_last, "workers": workers}
    train_data = ImageBatches(
        listing.train, config.batch_size, train=True, crop=crop, resize=resize, **common
    )
    test_data = ImageBatches(
        listing.val, EVAL_BATCH, train=False, crop=crop, resize=resize, **common
    )
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input sizes: pick the fastest kernels

    model = place_model(
        lambda: build_imagenet_model(
            config.model, num_classes=NUM_CLASSES, zero_init_residual=config.zero_init_residual
        ),
        config,
        comm,
    )
    optimizer, start_lr, peak_lr = momentum_sgd(
        model, task, config.batch_size, comm.size, config.lr
    )
    schedule, schedule_config = schedule_for(
        config, task, start_lr, peak_lr, epoch_steps(train_data, comm.size)
    )
    trainer = ImageNetTrainer(
        model,
        optimizer,
        schedule,
        goal(config, task),
        comm,
        train_data,
        test_data,
        open_reporter(),
        task=task.name,
        seed=config.seed,
        device=device,
        amp=config.amp,
        log_every=config.log_every,
    )
    if config.amp and config.amp_dtype == "bfloat16":
        trainer.amp_dtype, trainer.scaler = torch.bfloat16, None  # float32's range: no scaler
    trainer.label_smoothing = config.label_smoothing
    recorded = {
        "train_images": len(train_data),
        "test_images": len(test_data),
        "crop": crop,
        "eval_resize": resize,
        "smoke_test_crop": crop != CROP,
        "lr_schedule": config.lr_schedule,
        "warmup_epochs": task.warmup_epochs,
        **schedule_config,
        "momentum": task.momentum,
        "weight_decay": task.weight_decay,
        "label_smoothing": config.label_smoothing,
        "zero_init_residual": config.zero_init_residual,
        "amp": config.amp,
        "amp_dtype": str(trainer.amp_dtype).removeprefix("torch.") if config.amp else None,
        "channels_last": config.channels_last,
        "data_workers": workers,
    }
    if data.name == "synthetic":
        synthetic_banner(say, "ImageNet", data.note)
    if recorded["smoke_test_crop"]:
        say(
            f"SMOKE TEST: {crop}-pixel crops instead of the benchmark's 224 (--crop); the "
            "accuracy is not comparable with 224-pixel results"
        )
    return Built(
        trainer=trainer,
        dataset=data.name,
        note=data.note,
        real_name="ImageNet",
        peak_lr=peak_lr,
        data_line=(
            f"data {data.name} ({len(train_data)} train / {len(test_data)} val images "
            f"in {train_data.folder.parent}, {workers} loader process(es)/rank, "
            f"crop {crop}, lr schedule {config.lr_schedule})"
        ),
        config=recorded,
        results=_results,
        footer=_footer,
    )


def schedule_for(
    config: RunConfig, task: ImageNetTask, start_lr: float, peak_lr: float, steps: int
) -> tuple[Schedule, dict]:
    """The `--lr-schedule` for this run's steps, and its parameters for the summary's
    config, under the names mlbench_master/results/mllog.py logs as MLPerf's keys (a
    decay's boundaries and factor; an end rate, a power and a decay length in steps), for
    `steps` steps per epoch."""
    warmup = round(task.warmup_epochs * steps)
    total = config.max_epochs * steps
    if config.lr_schedule == "poly":
        poly = poly_schedule(peak_lr, warmup, total, task.poly_end_lr, task.poly_power)
        return poly, {
            "end_lr": poly.end_lr,
            "poly_power": poly.power,
            "decay_steps": poly.poly_steps,
        }
    if config.lr_schedule == "cosine":
        cosine = CosineSchedule(start_lr, peak_lr, warmup, (), 1.0, total_steps=total)
        return cosine, {"end_lr": 0.0, "decay_steps": max(1, total - warmup)}
    step = Schedule.of_task(task, start_lr, peak_lr, steps)
    return step, {"decay_epochs": list(task.decay_epochs), "decay_factor": task.decay_factor}


def _results(trainer: Trainer) -> dict:
    return {"final_val_top5_accuracy": getattr(trainer, "val_top5", None)}


def _footer(summary: dict) -> str:
    top5 = summary.get("final_val_top5_accuracy")
    lines = [f"final val top-5 accuracy: {'-' if top5 is None else f'{top5:.4g}'}"]
    if summary["config"].get("smoke_test_crop"):
        lines.append(f"SMOKE TEST crop {summary['config']['crop']} px (the benchmark's: 224)")
    return "\n".join(lines)
