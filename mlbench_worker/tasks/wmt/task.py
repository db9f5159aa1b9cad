"""Task 4b: machine translation, the Transformer on WMT17 English-to-German.

The original mlbench's task 4b (its image ``mlbench/pytorch-wmt17-transformer-all-reduce``,
goal BLEU 25 on newstest2017) trains the "base" Transformer of Vaswani et al. 2017
("Attention Is All You Need", arXiv:1706.03762) as fairseq's `transformer_wmt_en_de`:

- model: 6 encoder and 6 decoder layers, d_model 512, 8 heads, feed-forward 2048, dropout
  0.1, post-norm, one embedding shared by the encoder's input, the decoder's input and the
  output projection (models/transformer_mt.py); a shared source-target vocabulary of
  37,000 sub-words (here a SentencePiece BPE model trained on the training text);
- loss: cross-entropy with label smoothing 0.1 over the target tokens (padding ignored);
- optimisation: Adam (betas 0.9, 0.98, eps 1e-9), the rate d_model^-0.5 x min(step^-0.5,
  step x warmup^-1.5) with 4,000 warm-up steps: a linear rise to 7.0e-4, then decay as the
  inverse square root of the step (InverseSqrtSchedule);
- batches by tokens: sentence pairs of similar length together, up to `batch_size`
  (4,096) source-or-target tokens a worker, counting padding (fairseq's --max-tokens).

Scaling to K workers: the gradient is averaged over the ranks, so a step covers K x 4,096
tokens; the rate is not scaled (the paper's rate was set for 8 GPUs, about 25,000 tokens
of each side a step; K = 8 here is 32,768 tokens).

The small model (`transformer-small`: 2 + 2 layers, width 128, 4 heads, feed-forward 512)
is the same family at a size a CPU trains in minutes, with a shorter warm-up and a higher
peak (its own, stated in MT_MODELS): for tests, the generated corpus and the CPU.

The model, data set, goals, batch, rate and epochs are the catalogue's
(mlbench_worker/shared/sequence_catalogue.py); the sizes of each model are MT_MODELS'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.base import catalogue_fields


@dataclass(frozen=True)
class TranslationModelSpec:
    """One encoder-decoder's sizes and its rate schedule (the vocabulary comes from data)."""

    layers: int  # encoder layers, and as many decoder layers
    width: int  # d_model
    heads: int
    feedforward: int
    dropout: float
    warmup_steps: int  # the inverse-square-root schedule's warm-up
    peak_lr: float  # width^-0.5 x warmup^-0.5 for the base; the small model's own


MT_MODELS: dict[str, TranslationModelSpec] = {
    "transformer-base": TranslationModelSpec(6, 512, 8, 2048, 0.1, 4000, 7e-4),
    # Ours: a higher peak and a short warm-up, so that it learns the generated corpus in
    # the few hundred steps a CPU test gives it.
    "transformer-small": TranslationModelSpec(2, 128, 4, 512, 0.1, 100, 2e-3),
}


@dataclass(frozen=True)
class TranslationTask:
    """An encoder-decoder trained on sentence pairs and graded by BLEU (task 4b).

    BLEU (sacrebleu's corpus BLEU of the greedy-decoded test set, detokenised) is posted as
    `val_bleu`, the goal's metric, reached from below; the validation loss and accuracy
    beside it are the teacher-forced per-token ones.
    """

    setup: ClassVar[str] = "mlbench_worker.tasks.wmt.setup"  # see Task
    task_options: ClassVar[tuple[str, ...]] = ()
    synthetic_on_disk: ClassVar[bool] = False

    name: str
    model: str
    dataset: str
    batch_size: int  # tokens per worker (source or target, padding counted)
    base_lr: float  # the base model's peak rate
    max_epochs: int
    models: tuple[str, ...] = tuple(MT_MODELS)
    label_smoothing: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    targets: dict[str, float] = field(default_factory=dict)  # goal name -> BLEU
    description: str = ""

    def target_accuracy(self, target: str) -> float:
        """The value of the goal `target` (a BLEU score, reached from below)."""
        return self.targets[target]


TASKS = [
    TranslationTask(**catalogue_fields(info))
    for info in catalogue.TASKS.values()
    if info.dataset == "wmt17"
]
