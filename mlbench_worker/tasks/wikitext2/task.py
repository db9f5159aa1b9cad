"""Task 3: language modelling on WikiText-2 (word level), tasks 3a and 3b.

Task 3a is the original mlbench's language-modelling task (its image
``mlbench/pytorch-wikitext2-lstm-all-reduce``; the mlbench documentation's "Task 3a:
Language Modelling, WikiText-2, AWD-LSTM", goal validation perplexity 70), with the model
and regularisation of Merity, Keskar and Socher, "Regularizing and Optimizing LSTM Language
Models", ICLR 2018 (arXiv:1708.02182), as their reference code trains WikiText-2:

- model: embedding 400, three LSTM layers of 1150 units (the last of 400, so the decoder can
  share the embedding's weights), weight-dropped hidden-to-hidden matrices (DropConnect,
  p 0.5), locked (variational) dropout on the embedding output 0.65, between layers 0.2 and
  on the last output 0.4, embedding dropout 0.1 (models/awd_lstm.py);
- data: per worker 80 columns of the token stream, back-propagation through 70 tokens, the
  sequence length drawn each step (70 with probability 0.95, else 35, then normal with
  standard deviation 5, at least 5), the rate scaled by length / 70 for that step;
- loss: cross-entropy plus activation regularisation alpha 2 (on the last layer's dropped
  output) and temporal activation regularisation beta 1 (on its raw output), gradient
  clipping at norm 0.25, weight decay 1.2e-6;
- optimisation: plain SGD at rate 30, then averaged SGD (the iterates' running average,
  what torch's ASGD with t0 = 0, lambda = 0 computes) from the first evaluation whose
  validation loss is worse than the best of all evaluations before the last 5
  (non-monotone trigger, n = 5); evaluation then uses the averaged weights.

Scaling to K workers (each with its own 80 columns): the gradient is averaged over the
ranks, so the step covers K times the tokens; the rate is raised from 30 to 30 * sqrt(K)
by a linear warm-up over the first `warmup_epochs` (square-root scaling, which keeps SGD's
noise scale for the averaged gradient; the linear rule that task 1a follows overshoots at
a rate already as high as 30). We could not read the original's distributed rule on the
machines this was written on; this is our rule, stated here and in docs/tasks.rst.

Task 3b is ours: a small decoder-only Transformer (models/gpt.py) trained as nanoGPT trains
its small models: AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices only), a linear
warm-up then a cosine decay to a tenth of the peak over the run's epochs, gradient clipping
at 1.0; blocks of 128 tokens, 16 per worker, the rate scaled linearly with the workers
(Goyal et al. 2017) up to 8.

The model, data set, goals, batch, rate and epochs are the catalogue's
(mlbench_worker/shared/catalogue.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlbench_worker.models import LM_MODELS
from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.base import catalogue_fields

LSTM, GPT = "lstm", "gpt"


@dataclass(frozen=True)
class LanguageTask:
    """A word-level language model trained on a token stream (task 3a or 3b).

    `kind` says which recipe applies (LSTM: the AWD-LSTM's; GPT: nanoGPT's). Perplexity is
    exp of the mean cross-entropy per token over the whole validation stream; the goals
    are reached when it falls to their value.
    """

    setup: ClassVar[str] = "mlbench_worker.tasks.wikitext2.setup"  # see Task
    task_options: ClassVar[tuple[str, ...]] = ("--vocab-size",)
    synthetic_on_disk: ClassVar[bool] = False

    name: str
    model: str
    dataset: str
    batch_size: int  # columns (LSTM) or blocks (GPT) per worker
    base_lr: float
    max_epochs: int
    kind: str
    models: tuple[str, ...] = ()
    bptt: int = 70  # LSTM: the mean back-propagation length
    clip: float = 0.25
    weight_decay: float = 1.2e-6
    warmup_epochs: float = 1.0
    # LSTM only
    alpha: float = 2.0  # activation regularisation
    beta: float = 1.0  # temporal activation regularisation
    nonmono: int = 5  # evaluations the averaging trigger looks back past
    # GPT only
    lr_scale_cap: int = 8
    final_lr_fraction: float = 0.1
    targets: dict[str, float] = field(default_factory=dict)  # goal name -> val perplexity
    description: str = ""

    def target_accuracy(self, target: str) -> float:
        """The value of the goal `target` (a validation perplexity, reached from above)."""
        return self.targets[target]


def _task(info: catalogue.TaskInfo) -> LanguageTask:
    kind = LSTM if info.model.startswith("awd-lstm") else GPT
    models = tuple(m for m, spec in LM_MODELS.items() if spec.kind == kind)
    if kind == LSTM:
        return LanguageTask(**catalogue_fields(info), kind=kind, models=models)
    return LanguageTask(
        **catalogue_fields(info),
        kind=kind,
        models=models,
        clip=1.0,
        weight_decay=0.1,
        warmup_epochs=0.25,
    )


TASKS = [_task(info) for info in catalogue.TASKS.values() if info.dataset == "wikitext2"]
