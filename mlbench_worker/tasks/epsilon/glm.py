"""Generalised linear models: a linear score z = w.x + b and a loss l(z, y), labels y = -1/+1.

The parameters are ONE flat vector theta = (w, b), so the gradient is one contiguous buffer
for the all-reduce and the L2 penalty lambda/2 |theta|^2 covers weights and bias alike (as
the original mlbench regularised all parameters). The objective on n rows is

    f(theta) = 1/n sum_i l(z_i, y_i) + lambda/2 |theta|^2,  z_i = w.x_i + b.

Its gradient needs no autograd: d f / d w = 1/n sum_i l'(z_i, y_i) x_i (one matrix-vector
product with the batch), d f / d b = 1/n sum_i l'(z_i, y_i), and the penalty's lambda*theta is
the optimizer's weight decay. A model is therefore just l and its derivative l':

- ``logistic-regression``: l = log(1 + exp(-y z)), l' = -y sigma(-y z). Its curvature is
  at most 1/4 (times |x|^2 + 1).
- ``ridge`` (least squares, a Gaussian GLM): l = (z - y)^2 / 2, l' = z - y. Its curvature
  is |x|^2 + 1 = 2 along the bias for epsilon's unit-norm rows, so plain SGD is stable only
  below a rate of about 2 / 2 = 1 (measured on the synthetic set: 1 converges, 2 oscillates,
  4 diverges), whatever the number of workers. Ridge therefore takes 1/8 of the task's rate
  (0.5 for one worker) and its scaled rate is capped at 1.0. Chosen here; the original
  platform had no ridge benchmark.

A prediction is the sign of z; accuracy counts the rows with y z > 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mlbench_worker.tasks.epsilon import GLMS, GlmRates


class LinearModel(torch.nn.Module):
    """z = w.x + b, with theta = (w, b) in one parameter; starts at zero (the problem is
    convex, so the start only changes how long it takes, never where it ends)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.features = features
        self.theta = torch.nn.Parameter(torch.zeros(features + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmv(self.theta[-1], x, self.theta[:-1])

    def export_module(self) -> torch.nn.Module:
        """This model for the ONNX export (training/torch_export.py): torch's exporter has no
        addmv, so the export computes the same score as a product and a sum (equal up to
        float rounding), while training keeps its fused forward."""
        return LinearScores(self)


class LinearScores(torch.nn.Module):
    """z = x.w + b of a LinearModel, in operators ONNX has."""

    def __init__(self, model: LinearModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.model.theta
        return x @ theta[:-1] + theta[-1]


def _logistic(
    z: torch.Tensor, y: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    minus_margin = (y * z).neg_()
    # -y sigma(-y z), not the shorter y (sigma(y z) - 1): that one cancels to 0 for margins
    # above ~17 in float32 where the true derivative is still ~1e-8.
    dz = torch.sigmoid(minus_margin).mul_(y).mul_(-scale)
    return F.softplus(minus_margin).sum(), dz, (minus_margin < 0).sum()


def _squared(
    z: torch.Tensor, y: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r = z - y
    loss_sum = torch.dot(r, r).mul_(0.5)
    return loss_sum, r.mul_(scale), correct(z, y)


@dataclass(frozen=True)
class Glm:
    """A loss as a function of the score. `batch(z, y, scale)` gives, for a batch of scores
    z and labels y: the summed loss, `scale` times the derivatives d l / d z (one per row),
    and the number of rows classified right; a few fused tensor operations, because on a
    linear model these dominate the step as much as the matrix-vector products do."""

    name: str
    batch: Callable[
        [torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ]
    rates: GlmRates


_BATCH = {"logistic-regression": _logistic, "ridge": _squared}


def get_glm(name: str) -> Glm:
    """The model called `name` (one of mlbench_worker.tasks.epsilon.GLMS)."""
    return Glm(name, _BATCH[name], GLMS[name])


def correct(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How many rows the sign of z classifies right: y z > 0 (a score of exactly 0 is no
    prediction, so it is never right; only an all-zero model produces one)."""
    return (y * z > 0).sum()
