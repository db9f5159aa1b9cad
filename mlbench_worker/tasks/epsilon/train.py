"""Task 2's trainer: the reference Trainer's loop with a linear model's closed-form gradient.

Everything that makes a benchmark (the clock, the time split, the flat gradient buffer and
its one all-reduce per step with the scalar slots riding along, metrics, goals, time budget,
checkpoints) is the reference Trainer's (training/trainer.py). This subclass supplies what differs for a GLM:

- `forward_backward`: the gradient of the batch's mean loss, written straight into the flat
  buffer as X^T l'(z) / B and sum(l'(z)) / B (see glm.py). No autograd graph is built: for a
  linear model it would cost more than the arithmetic. The optimizer is torch's SGD, whose
  weight decay adds the L2 penalty's gradient lambda * theta.
- `epoch_indices`: the rank's fixed shard in a new order each epoch (data.py says why).
- `evaluate`: score the rank's part of the test set slice by slice; its predictions are
  the sign of the score (+1 for a score of 0 or more, -1 below, as the generated set's
  labels are drawn), where the own accuracy counts a score of exactly 0 as wrong for
  either label (glm.py): the two differ only on rows a model scores exactly 0.
- the learning-rate schedule: reduced on plateaus of the validation loss (PlateauSchedule).

The gradient exchange stays flat (the run's algorithm exchanges after the gradient is
written): the bucketed all-reduce overlapped with backward starts buckets from autograd's
hooks, and without autograd there is no backward to hide communication behind
(`flat_only`).

Throughput is counted in samples ("samples_per_sec"), the catalogue's unit for task 2.
"""

from __future__ import annotations

import numpy as np
import torch

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation.predictions import LABEL
from mlbench_worker.tasks.epsilon.data import Rows, epoch_order, test_indices
from mlbench_worker.tasks.epsilon.glm import Glm
from mlbench_worker.tasks.epsilon.schedule import PlateauSchedule, plateau_schedule  # noqa: F401
from mlbench_worker.training.trainer import CORRECT, LOSS, Trainer


class LinearTrainer(Trainer):
    """The reference Trainer for a LinearModel and a Glm on Rows (see the module docstring)."""

    task = catalogue.LOGREG_EPSILON.name
    flat_only = "its closed-form gradient has no backward pass to overlap with"
    train_data: Rows
    test_data: Rows
    schedule: PlateauSchedule

    def __init__(
        self,
        model: torch.nn.Module,
        glm: Glm,
        *args: object,
        test_total: int | None = None,
        **kwargs: object,
    ) -> None:
        """`test_total`: the rows of the whole test set, of which this rank holds every K-th
        (data.test_indices); None when the rank holds all of them (one rank)."""
        self.glm = glm
        super().__init__(model, *args, **kwargs)  # type: ignore[arg-type]
        self.test_total = len(self.test_data) if test_total is None else test_total
        # Views made once: slicing a tensor costs as much as a small operation on it. The
        # optimizer and checkpoint restores write into theta in place, so they stay valid.
        theta, grads = model.theta.data, self.grads.grads
        self.w, self.b = theta[:-1], theta[-1]
        self.grad_w, self.grad_b = grads[:-1], grads[-1]

    @property
    def grad_scale(self) -> float:
        """1/K for algorithms that average gradients over ranks, 1 for those whose ranks
        step on their own (the algorithm says: algorithms/interface.py)."""
        return self.allreduce.grad_scale

    def epoch_indices(self, epoch: int) -> np.ndarray:
        return epoch_order(len(self.train_data), self.seed, epoch, self.comm.rank)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        z = torch.addmv(self.b, x, self.w)
        # Mean over the batch, and 1/K so that the all-reduced sum is the average over ranks.
        loss_sum, dz, right = self.glm.batch(z, y, self.grad_scale / y.shape[0])
        torch.mv(x.t(), dz, out=self.grad_w)
        torch.sum(dz, 0, out=self.grad_b)
        if self.extra_host is not None:
            self.extra_host[LOSS] = loss_sum.item()
            self.extra_host[CORRECT] = right.item()
        else:
            self.grads.extra[LOSS] = loss_sum
            self.grads.extra[CORRECT] = right

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Global validation loss (the data term, without the penalty) and accuracy."""
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        kept = self.keeps_predictions()
        for x, y in self.test_data.slices(self.test_data.batch_size):
            z = torch.addmv(self.b, x, self.w)
            loss_sum, _, right = self.glm.batch(z, y, 0.0)
            sums[0] += loss_sum
            sums[1] += right
            sums[2] += y.shape[0]
            if kept is not None:
                sign = torch.where(z >= 0, 1, -1).to(torch.int8)
                kept.append((y.to(torch.int8), {LABEL: sign}))
        loss_sum, right, count = self.comm.allreduce_sums(sums.tolist())
        self.keep_shard(test_indices(self.test_total, self.comm.rank, self.comm.size), kept)
        return float(loss_sum / max(count, 1)), float(right / max(count, 1))

    def evaluate_and_track(self) -> None:
        super().evaluate_and_track()
        self.schedule.observe(self.progress.val_loss)
