"""One task-2 run's pieces on one rank: data, model, optimizer, schedule, trainer.

The learning rate for K workers and B samples per worker is the task's rate times the
model's factor (glm.py) times B / (the task's batch), multiplied by min(K, 16) (the original
mlbench scaled linearly up to 16 workers) and kept below the model's stability bound if it
has one (ridge: 1.0); that is where training starts, with no warm-up. The plateau rule
(linear/train.py) lowers it during training, never below the one-worker rate. `--lr`
replaces the starting rate (the floor is then the smaller of the two).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mlbench_worker.comm import Communicator, broadcast_model
from mlbench_worker.linear.data import LinearData, load
from mlbench_worker.linear.glm import LinearModel, get_glm
from mlbench_worker.linear.train import LinearTrainer, plateau_schedule
from mlbench_worker.report import Reporter
from mlbench_worker.tasks.base import LinearTask
from mlbench_worker.train import Goal

EVAL_BATCH = 4096


@dataclass
class LinearSetup:
    trainer: LinearTrainer
    data: LinearData
    peak_lr: float
    floor_lr: float
    l2: float


def build(
    args: argparse.Namespace,
    comm: Communicator,
    task: LinearTask,
    say: Callable[[str], None],
    open_reporter: Callable[[], Reporter],
) -> LinearSetup:
    """Load this rank's rows and build the trainer (the reporter is opened once data is in)."""
    device = comm.device
    data = load(
        args.dataset,
        args.data_dir,
        args.seed,
        comm,
        features=task.features,
        batch_size=args.batch_size,
        device=device,
        synthetic_rows=(task.train_rows, task.test_rows),
        train_rows=args.train_images,
        test_rows=args.test_images,
        eval_batch=EVAL_BATCH,
        say=say,
    )
    glm = get_glm(args.model)
    torch.manual_seed(args.seed)
    model = LinearModel(data.features).to(device)
    broadcast_model(model, comm)

    floor_lr = task.base_lr * glm.rates.factor * args.batch_size / task.batch_size
    peak_lr = floor_lr * min(comm.size, task.lr_scale_cap)
    if glm.rates.max_lr is not None:
        floor_lr, peak_lr = min(floor_lr, glm.rates.max_lr), min(peak_lr, glm.rates.max_lr)
    peak_lr = args.lr or peak_lr
    l2 = task.l2 if args.l2 is None else args.l2
    optimizer = torch.optim.SGD(model.parameters(), lr=peak_lr, momentum=0.0, weight_decay=l2)
    schedule = plateau_schedule(peak_lr, floor_lr, task.plateau_factor, task.plateau_threshold)
    goal = Goal(args.target, task.target_accuracy(args.target), args.max_epochs, args.time_budget)
    trainer = LinearTrainer(
        model,
        glm,
        optimizer,
        schedule,
        goal,
        comm,
        data.train,
        data.test,
        open_reporter(),
        seed=args.seed,
        device=device,
        log_every=args.log_every,
    )
    return LinearSetup(trainer, data, peak_lr, schedule.floor_lr, l2)
