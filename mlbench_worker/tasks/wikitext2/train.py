"""Task 3's trainers: the reference Trainer's loop with a language model's step and
evaluation.

Everything that makes a benchmark (the clock and its split into data, compute and
communication, the gradient exchange of the run's algorithm, the scalar slots riding along,
metrics, goal tracking, time budget, checkpoints) is the reference Trainer's
(training/trainer.py). These subclasses supply what differs for a language model:

- `epoch_indices`: the steps of an epoch, the same on every rank: the AWD-LSTM's windows of
  random length down its columns (data.lstm_windows); the GPT's blocks in a new order.
- `forward_backward`: the loss over every token of the step (the LSTM adds AR and TAR,
  task.py), whose sum and the tokens predicted right ride in the LOSS and CORRECT slots;
  the step's token count is the throughput's unit (tokens/s).
- `evaluate`: the mean cross-entropy per token over this rank's part of the validation
  stream, summed over ranks; its exp is the perplexity posted as `val_perplexity`, the
  goal's metric. The "accuracy" beside it is next-word accuracy.

The AWD-LSTM carries its hidden state down its columns from step to step (detached: back-
propagation through the window only), starting from zeros at each epoch; its switch to
averaged SGD happens after an evaluation (`evaluate_and_track`).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.models.awd_lstm import detach
from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.wikitext2.data import LSTM_EVAL_COLUMNS, batchify, lstm_windows
from mlbench_worker.tasks.wikitext2.export import onnx_bytes
from mlbench_worker.tasks.wikitext2.optim import AveragedSGD
from mlbench_worker.training.progress import CORRECT, LOSS, record_evaluation
from mlbench_worker.training.sampled_accuracy import right_predictions
from mlbench_worker.training.trainer import Trainer

PERPLEXITY = "val_perplexity"


class LanguageTrainer(Trainer):
    """Shared by both models: the evaluation's bookkeeping and the perplexity."""

    valid_tokens: torch.Tensor  # this rank's part of the validation stream

    def _slots(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        """The step's loss sum and right predictions (counted on one token in
        ACCURACY_STRIDE: training/sampled_accuracy.py) into the slots that ride along."""
        extra = self.grads.extra
        extra[LOSS] = loss.detach().float() * y.shape[0]
        extra[CORRECT] = right_predictions(logits, y, self.progress.step)

    def _finish_evaluation(self, sums: torch.Tensor) -> tuple[float, float]:
        loss_sum, right, count = self.comm.allreduce_sums(sums.tolist())
        self.hit_rates = [float(right / max(count, 1))]
        return float(loss_sum / max(count, 1)), self.hit_rates[0]

    def evaluate_and_track(self) -> None:
        with self.allreduce.evaluation():
            val_loss, val_acc = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter,
            self.comm.rank, self.print, extra={PERPLEXITY: perplexity(val_loss)},
        )  # fmt: skip
        if self.predictions is not None:  # no predictions: the final model is graded
            self.predictions.note_evaluation(self.progress.history[-1])

    def final_onnx(self) -> bytes:
        """Rank 0, in the evaluation context: the model its evaluation runs, as the evaluator
        grades it (export.py's contract), with the AWD-LSTM's averaged weights once averaged
        SGD began."""
        averaged = getattr(self.optimizer, "averaged", contextlib.nullcontext)
        with averaged():
            return onnx_bytes(self.model)


def stopped_improving(losses: list[float], nonmono: int) -> bool:
    """The AWD-LSTM's non-monotone trigger: the last validation loss is worse than the best
    of every evaluation before the last `nonmono` ones."""
    return len(losses) > nonmono and losses[-1] > min(losses[:-nonmono])


def perplexity(mean_loss: float) -> float:
    """exp of the mean cross-entropy per token (inf past what a float holds)."""
    return math.exp(mean_loss) if mean_loss < 700 else math.inf


class AwdLstmTrainer(LanguageTrainer):
    """Task 3a (see the module docstring and task.py)."""

    task = catalogue.AWD_LSTM_WIKITEXT2.name
    optimizer: AveragedSGD

    def __init__(self, *args, bptt: int, alpha: float, beta: float, nonmono: int, **kwargs):
        self.bptt, self.alpha, self.beta, self.nonmono = bptt, alpha, beta, nonmono
        self.hidden = None
        super().__init__(*args, **kwargs)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        return lstm_windows(len(self.train_data), self.bptt, self.seed, epoch)

    def train_one_epoch(self, epoch: int) -> bool:
        self.hidden = None  # every epoch starts its columns from zero states
        return super().train_one_epoch(epoch)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        model = self.allreduce.train_module or self.model
        if self.hidden is None:
            self.hidden = self.model.init_hidden(x.shape[1])
        self.schedule.seq_len = x.shape[0]  # the rate of this step (optim.LengthScaledSchedule)
        logits, hidden, raw, dropped = model(x, self.hidden)
        self.hidden = detach(hidden)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        total = loss
        if self.alpha:
            total = total + self.alpha * dropped.pow(2).mean()
        if self.beta:
            total = total + self.beta * (raw[1:] - raw[:-1]).pow(2).mean()
        scale = self.allreduce.grad_scale
        (total * scale if scale != 1.0 else total).backward()
        self._slots(loss, logits, y)

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """This rank's part of the validation stream in LSTM_EVAL_COLUMNS columns, read in
        windows of bptt with the state carried, as the AWD-LSTM evaluates."""
        model = self.model
        grid = torch.from_numpy(batchify(self.valid_tokens, LSTM_EVAL_COLUMNS)).to(self.device)
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        model.eval()
        with self.optimizer.averaged():
            hidden = model.init_hidden(grid.shape[1])
            for start in range(0, grid.shape[0] - 1, self.bptt):
                x = grid[start : start + self.bptt]
                y = grid[start + 1 : start + 1 + x.shape[0]].reshape(-1)
                x = x[: y.shape[0] // grid.shape[1]]
                logits, hidden, _, _ = model(x, hidden)
                flat = logits.reshape(-1, logits.shape[-1])
                sums[0] += F.cross_entropy(flat, y, reduction="sum")
                sums[1] += (flat.argmax(-1) == y).sum()
                sums[2] += y.shape[0]
        model.train()
        return self._finish_evaluation(sums)

    def evaluate_and_track(self) -> None:
        """Evaluate, then switch to averaged SGD once the validation loss is worse than the
        best of every evaluation before the last `nonmono` (the AWD-LSTM's trigger)."""
        super().evaluate_and_track()
        losses = [h["val_loss"] for h in self.progress.history]
        if not self.optimizer.averaging and stopped_improving(losses, self.nonmono):
            self.optimizer.start_averaging()
            self.print(f"validation stopped improving: averaged SGD from step {self.progress.step}")
            if self.comm.rank == 0:
                self.reporter.metric("averaging_started", float(self.progress.step),
                                     step=self.progress.step, elapsed=round(self.elapsed(), 3))  # fmt: skip


class GptTrainer(LanguageTrainer):
    """Task 3b (see the module docstring and task.py)."""

    task = catalogue.GPT_WIKITEXT2.name

    def __init__(self, *args, block: int, **kwargs):
        self.block = block
        super().__init__(*args, **kwargs)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        # The same order on every rank is not needed (each visits its own blocks), but the
        # same number of steps is: every rank holds the same number of blocks.
        return np.random.default_rng([self.seed, epoch, self.comm.rank]).permutation(
            len(self.train_data)
        )

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        model = self.allreduce.train_module or self.model
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        scale = self.allreduce.grad_scale
        (loss * scale if scale != 1.0 else loss).backward()
        self._slots(loss, logits, y)

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """This rank's part of the validation stream in consecutive blocks (the last one
        shorter), each token predicted from the tokens before it in its block."""
        tokens = torch.from_numpy(self.valid_tokens).to(self.device)
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        self.model.eval()
        n = tokens.shape[0] - 1
        full = n // self.block
        batch = 32
        starts = list(range(0, full * self.block, self.block))
        for i in range(0, len(starts), batch):
            chunk = starts[i : i + batch]
            x = torch.stack([tokens[s : s + self.block] for s in chunk])
            y = torch.stack([tokens[s + 1 : s + 1 + self.block] for s in chunk]).reshape(-1)
            self._score(self.model(x), y, sums)
        if n > full * self.block:
            s = full * self.block
            self._score(self.model(tokens[s:n][None]), tokens[s + 1 : n + 1], sums)
        self.model.train()
        return self._finish_evaluation(sums)

    @staticmethod
    def _score(logits: torch.Tensor, y: torch.Tensor, sums: torch.Tensor) -> None:
        flat = logits.reshape(-1, logits.shape[-1])
        sums[0] += F.cross_entropy(flat, y, reduction="sum")
        sums[1] += (flat.argmax(-1) == y).sum()
        sums[2] += y.shape[0]
