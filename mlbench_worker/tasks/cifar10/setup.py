"""One task-1a run's pieces on one rank: data, model, optimizer, schedule, trainer.

The learning rate is the task's rate for its batch times B / (the task's batch) for B
images per worker, times K workers (linear scaling), reached by a linear warm-up over the
task's warm-up epochs from the one-worker rate, then divided at the task's decay epochs
(task.py). `--lr` replaces the peak. The channel statistics that normalise
the images are CIFAR-10's own for the real set, and measured on the stand-in for synthetic.
"""

from __future__ import annotations

from collections.abc import Callable

from mlbench_worker.data.images import epoch_steps
from mlbench_worker.data.loader import CIFAR10_MEAN, CIFAR10_STD, Batches, channel_stats
from mlbench_worker.models import build_model
from mlbench_worker.tasks import Task
from mlbench_worker.tasks.cifar10.data import load_dataset
from mlbench_worker.training.build import Built, Say, goal, place_model, synthetic_banner
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.recipe import Schedule, momentum_sgd
from mlbench_worker.training.trainer import Trainer

EVAL_BATCH = 500


def build(
    config: RunConfig,
    comm: Communicator,
    task: Task,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """CIFAR-10 (or its stand-in), a ResNet, SGD with momentum, warm-up and decay."""
    device = comm.device
    data = load_dataset(
        config.dataset, config.data_dir, config.seed, comm, config.train_images, config.test_images
    )
    if data.name == "synthetic":
        synthetic_banner(say, "CIFAR-10", data.note)
    arrays = data.arrays
    mean, std = (
        (CIFAR10_MEAN, CIFAR10_STD) if data.name == "cifar10" else channel_stats(arrays.train_x)
    )
    images = {"mean": mean, "std": std, "device": device, "channels_last": config.channels_last}
    train_data = Batches(arrays.train_x, arrays.train_y, config.batch_size, augment=True, **images)
    test_data = Batches(arrays.test_x, arrays.test_y, EVAL_BATCH, augment=False, **images)

    model = place_model(lambda: build_model(config.model), config, comm)
    optimizer, start_lr, peak_lr = momentum_sgd(
        model, task, config.batch_size, comm.size, config.lr
    )
    schedule = Schedule.of_task(task, start_lr, peak_lr, epoch_steps(train_data, comm.size))
    trainer = Trainer(
        model,
        optimizer,
        schedule,
        goal(config, task),
        comm,
        train_data,
        test_data,
        open_reporter(),
        seed=config.seed,
        device=device,
        amp=config.amp,
        log_every=config.log_every,
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
            "amp": config.amp,
            "channels_last": config.channels_last,
        },
    )
