"""One task-2 run's pieces on one rank: data, model, optimizer, schedule, trainer. The rates
are schedule.py's (shared with the Spark implementation).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mlbench_worker.tasks.epsilon.data import load
from mlbench_worker.tasks.epsilon.glm import LinearModel, get_glm
from mlbench_worker.tasks.epsilon.schedule import rates
from mlbench_worker.tasks.epsilon.task import LinearTask
from mlbench_worker.tasks.epsilon.train import LinearTrainer, plateau_schedule
from mlbench_worker.training.build import Built, Say, goal, place_model, synthetic_banner
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.metric_sink import Reporter

EVAL_BATCH = 4096


def build(
    config: RunConfig,
    comm: Communicator,
    task: LinearTask,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """Epsilon (or its stand-in), a GLM, plain SGD with a plateau schedule (the reporter is
    opened once the data is in)."""
    device = comm.device
    data = load(
        config.dataset,
        config.data_dir,
        config.seed,
        comm,
        features=task.features,
        batch_size=config.batch_size,
        device=device,
        synthetic_rows=(task.train_rows, task.test_rows),
        train_rows=config.train_images,
        test_rows=config.test_images,
        eval_batch=EVAL_BATCH,
        say=say,
    )
    if data.name == "synthetic":
        synthetic_banner(say, "epsilon", data.note)
    glm = get_glm(config.model)
    model = place_model(lambda: LinearModel(data.features), config, comm)

    floor_lr, peak_lr = rates(task, glm.rates, config.batch_size, comm.size, config.lr)
    l2 = task.l2 if config.l2 is None else config.l2
    optimizer = torch.optim.SGD(model.parameters(), lr=peak_lr, momentum=0.0, weight_decay=l2)
    schedule = plateau_schedule(peak_lr, floor_lr, task.plateau_factor, task.plateau_threshold)
    trainer = LinearTrainer(
        model,
        glm,
        optimizer,
        schedule,
        goal(config, task),
        comm,
        data.train,
        data.test,
        open_reporter(),
        test_total=data.test_total,
        seed=config.seed,
        device=device,
        log_every=config.log_every,
    )
    return Built(
        trainer=trainer,
        dataset=data.name,
        note=data.note,
        real_name="epsilon",
        peak_lr=peak_lr,
        data_line=(
            f"data {data.name} ({data.train_total} train / {data.test_total} test samples, "
            f"{data.features} features; {len(data.train)} rows on this rank)"
        ),
        config={
            "train_samples": data.train_total,
            "test_samples": data.test_total,
            "features": data.features,
            "l2": l2,
            "floor_lr": schedule.floor_lr,
        },
        # The plateau schedule's state is a function of the validation losses seen.
        after_restore=lambda t: t.schedule.replay(t.progress.history),
    )
