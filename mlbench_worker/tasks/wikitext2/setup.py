"""One task-3 run's pieces on one rank: tokens, model, optimiser, schedule, trainer.

AWD-LSTM (task 3a): AveragedSGD at the task's rate times B / 80 for B columns per worker,
raised to sqrt(K) times that by a linear warm-up over the task's warm-up epochs for K
workers (task.py says why the square root), each step's rate scaled by its window's length
(optim.LengthScaledSchedule), gradients clipped to norm 0.25.

GPT (task 3b): AdamW (betas 0.9, 0.95) at the task's rate times B / 16, times min(K, 8) for
K workers, warm-up then cosine to a tenth (optim.CosineSchedule), clipped to norm 1.

`--lr` replaces the peak rate. The summary adds the final and best validation perplexity.
Its config records what the evaluator needs to repeat the run's evaluation from the model
(shared/evaluation/perplexity.py): the validation tokens and vocabulary, and the
evaluation's geometry (the LSTM's `bptt` and `eval_columns`, the GPT's `block`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from mlbench_worker.models import LM_MODELS, build_language_model
from mlbench_worker.tasks.wikitext2.data import (
    LSTM_EVAL_COLUMNS,
    Blocks,
    Columns,
    batchify,
    load,
    lstm_steps,
)
from mlbench_worker.tasks.wikitext2.optim import (
    AveragedSGD,
    CosineSchedule,
    LengthScaledSchedule,
    clip_before_step,
)
from mlbench_worker.tasks.wikitext2.task import LSTM, LanguageTask
from mlbench_worker.tasks.wikitext2.train import AwdLstmTrainer, GptTrainer, LanguageTrainer
from mlbench_worker.training.build import Built, Say, goal, place_model, synthetic_banner
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter


def build(
    config: RunConfig,
    comm: Communicator,
    task: LanguageTask,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """WikiText-2 (or its stand-in), the task's language model and recipe."""
    device = comm.device
    data = load(
        config.dataset,
        config.data_dir,
        config.seed,
        comm,
        vocab=config.vocab_size,
        train_tokens=config.train_images,
        valid_tokens=config.test_images,
        say=say,
    )
    if data.name == "synthetic":
        synthetic_banner(say, "WikiText-2", data.note)
    spec = LM_MODELS[config.model]
    model = place_model(lambda: build_language_model(config.model, data.vocab), config, comm)
    common = {"seed": config.seed, "device": device, "log_every": config.log_every}
    trainer: LanguageTrainer
    if task.kind == LSTM:
        train = Columns(batchify(data.train, config.batch_size), device)
        start_lr = task.base_lr * config.batch_size / task.batch_size
        peak_lr = config.lr or start_lr * math.sqrt(comm.size)
        optimizer = AveragedSGD(model.parameters(), lr=start_lr, weight_decay=task.weight_decay)
        warmup = round(task.warmup_epochs * train.steps(lstm_steps(len(train), task.bptt)))
        schedule = LengthScaledSchedule(start_lr, peak_lr, warmup, (), 1.0, bptt=task.bptt)
        trainer = AwdLstmTrainer(
            model, optimizer, schedule, goal(config, task), comm, train, None, open_reporter(),
            bptt=task.bptt, alpha=task.alpha, beta=task.beta, nonmono=task.nonmono, **common,
        )  # fmt: skip
        shape = f"{train.columns} columns of {len(train)} tokens"
    else:
        train = Blocks(data.train, spec.block, config.batch_size, device)
        start_lr = task.base_lr * config.batch_size / task.batch_size
        peak_lr = config.lr or start_lr * min(comm.size, task.lr_scale_cap)
        optimizer = torch.optim.AdamW(
            model.decay_groups(task.weight_decay), lr=start_lr, betas=(0.9, 0.95)
        )
        steps = train.steps(len(train))  # every block once an epoch (GptTrainer.epoch_indices)
        schedule = CosineSchedule(
            start_lr / 10, peak_lr, round(task.warmup_epochs * steps), (), 1.0,
            total_steps=steps * config.max_epochs, final_lr=peak_lr * task.final_lr_fraction,
        )  # fmt: skip
        trainer = GptTrainer(
            model, optimizer, schedule, goal(config, task), comm, train, None, open_reporter(),
            block=spec.block, **common,
        )  # fmt: skip
        shape = f"{len(train)} blocks of {spec.block} tokens"
    if trainer.steps_per_epoch == 0 or len(train) < 2:
        raise WorkerError(
            f"each worker's {len(data.train)} training tokens make no whole step of "
            f"{config.batch_size} {'columns' if task.kind == LSTM else 'blocks'}: give more "
            "tokens or a smaller --batch-size",
            exit_code=1,
        )
    clip_before_step(optimizer, task.clip)
    trainer.valid_tokens = data.valid
    return Built(
        trainer=trainer,
        dataset=data.name,
        note=data.note,
        real_name="WikiText-2",
        peak_lr=peak_lr,
        data_line=(
            f"data {data.name} ({data.train_total} train / {data.valid_total} validation "
            f"tokens, {data.vocab} words; {shape} on this rank)"
        ),
        config={
            "train_tokens": data.train_total,
            "valid_tokens": data.valid_total,
            "vocab": data.vocab,
            "parameters": sum(p.numel() for p in model.parameters()),
            "clip": task.clip,
            "weight_decay": task.weight_decay,
            **(
                {
                    "bptt": task.bptt,
                    "alpha": task.alpha,
                    "beta": task.beta,
                    "eval_columns": LSTM_EVAL_COLUMNS,
                }
                if task.kind == LSTM
                else {"block": spec.block}
            ),  # fmt: skip
        },
        results=_results,
    )


def _results(trainer: LanguageTrainer) -> dict:
    seen = [h["val_perplexity"] for h in trainer.progress.history]
    return {
        "final_val_perplexity": seen[-1] if seen else None,
        "best_val_perplexity": min(seen) if seen else None,
    }
