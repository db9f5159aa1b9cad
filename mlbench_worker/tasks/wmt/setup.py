"""One task-4b run's pieces on one rank: sentence pairs, model, optimiser, schedule, trainer.

Adam (betas 0.9, 0.98, eps 1e-9) at the inverse-square-root rate of the model's spec
(task.MT_MODELS: the base model's 7.0e-4 after 4,000 warm-up steps), the same whatever the
number of workers (task.py says why); `--lr` replaces the peak. Label smoothing 0.1. The
summary adds the final and best BLEU; its config records what the evaluator and a reader
need: the pairs, the vocabulary, the model's sizes and the tokens a batch holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mlbench_worker.models.transformer_mt import TransformerMT
from mlbench_worker.tasks.wmt import tokens
from mlbench_worker.tasks.wmt.data import PairBatches, load
from mlbench_worker.tasks.wmt.task import MT_MODELS, TranslationTask
from mlbench_worker.tasks.wmt.train import BLEU, TranslationTrainer
from mlbench_worker.training.build import Built, Say, goal, place_model, synthetic_banner
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter


@dataclass
class InverseSqrtSchedule:
    """Vaswani et al.'s rate: a linear rise to `peak_lr` over `warmup_steps`, then
    peak x sqrt(warmup / step). Step 0 (the first step) takes the rate of step 1."""

    peak_lr: float
    warmup_steps: int

    def __call__(self, step: int) -> float:
        step = max(step, 1)
        return self.peak_lr * min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))


def build_model(name: str, vocab: int) -> TransformerMT:
    """A freshly initialised translation model called `name` (one of MT_MODELS)."""
    spec = MT_MODELS[name]
    return TransformerMT(vocab, spec.width, spec.heads, spec.layers, spec.layers,
                         spec.feedforward, spec.dropout, pad_id=tokens.PAD)  # fmt: skip


def build(
    config: RunConfig,
    comm: Communicator,
    task: TranslationTask,
    say: Say,
    open_reporter: Callable[[], Reporter],
) -> Built:
    """WMT17 (or its stand-in), the task's Transformer and recipe."""
    data = load(
        config.dataset, config.data_dir, config.seed, comm,
        train_pairs=config.train_images, test_sentences=config.test_images, say=say,
    )  # fmt: skip
    if data.name == "synthetic":
        synthetic_banner(say, "WMT17", data.note)
    spec = MT_MODELS[config.model]
    model = place_model(lambda: build_model(config.model, data.vocab), config, comm)
    mine = PairBatches(data.train, config.batch_size, comm.device)
    steps = min(comm.allgather_object(len(mine)))
    if steps == 0:
        raise WorkerError(
            f"a worker's {mine.pairs} training pairs make no batch of {config.batch_size} "
            "tokens: give more pairs or a larger --batch-size",
            exit_code=1,
        )
    train = PairBatches(data.train, config.batch_size, comm.device, steps=steps)
    peak_lr = config.lr or spec.peak_lr
    optimizer = torch.optim.Adam(model.parameters(), lr=peak_lr, betas=task.betas, eps=task.eps)
    schedule = InverseSqrtSchedule(peak_lr, spec.warmup_steps)
    trainer = TranslationTrainer(
        model, optimizer, schedule, goal(config, task), comm, train, None, open_reporter(),
        seed=config.seed, device=comm.device, log_every=config.log_every,
        label_smoothing=task.label_smoothing, sp_model=data.model,
        test_sources=data.test_sources, references=data.references,
    )  # fmt: skip
    return Built(
        trainer=trainer,
        dataset=data.name,
        note=data.note,
        real_name="WMT17",
        peak_lr=peak_lr,
        data_line=(
            f"data {data.name} ({data.train_total} training pairs / {len(data.references)} "
            f"test sentences, {data.vocab} sub-words; {steps} batches of up to "
            f"{config.batch_size} tokens an epoch on this rank)"
        ),
        config={
            "train_pairs": data.train_total,
            "test_sentences": len(data.references),
            "vocab": data.vocab,
            "parameters": sum(p.numel() for p in model.parameters()),
            "layers": spec.layers,
            "width": spec.width,
            "warmup_steps": spec.warmup_steps,
            "label_smoothing": task.label_smoothing,
            "decoding": "greedy",
            "batch_tokens": config.batch_size,
        },
        results=_results,
    )


def _results(trainer: TranslationTrainer) -> dict:
    seen = [h[BLEU] for h in trainer.progress.history if h.get(BLEU) is not None]
    return {
        "final_val_bleu": seen[-1] if seen else None,
        "best_val_bleu": max(seen) if seen else None,
    }
