"""The optimisers and schedules of task 3 (task.py says which recipe uses which).

`AveragedSGD` is the AWD-LSTM's optimiser in one object: plain SGD with weight decay until
`start_averaging`, then the same steps while it keeps the running average of the iterates
since that moment. That is what torch's ASGD computes with t0 = 0 and lambda = 0, the
settings the AWD-LSTM switches to: the same steps (the step size stays the rate), and the
mean of the iterates since the switch (torch's restarts its mean at the second step, so it
leaves the first iterate out; ours keeps it). One object keeps the switch and the
average in the optimiser's state, so checkpoints carry them and a resumed run continues
averaging where it stopped. `averaged` swaps the average into the model for evaluation.

Gradient clipping (`clip_before_step`) runs as a step pre-hook of the optimiser: after the
ranks' gradients are combined (the global gradient is clipped, as one large batch would
be), before the update, with no change to the training loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mlbench_worker.training.recipe import Schedule


class AveragedSGD(torch.optim.Optimizer):
    """SGD (no momentum) with weight decay, and after `start_averaging` the iterates'
    running average in each parameter's state ("ax")."""

    def __init__(self, params: Iterable, lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay, "averaged_steps": -1})

    @property
    def averaging(self) -> bool:
        return self.param_groups[0]["averaged_steps"] >= 0

    def start_averaging(self) -> None:
        for group in self.param_groups:
            group["averaged_steps"] = 0

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # torch's signature; no closure here
        for group in self.param_groups:
            lr, decay = group["lr"], group["weight_decay"]
            averaging = group["averaged_steps"] >= 0
            if averaging:
                group["averaged_steps"] += 1
            n = group["averaged_steps"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            # One kernel launch per list instead of two per parameter (the same arithmetic:
            # p + (-lr * decay) * p, then p + (-lr) * grad), a visible share of a CPU step.
            if decay:
                torch._foreach_add_(params, params, alpha=-lr * decay)
            torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)
            if averaging:
                for p in params:
                    state = self.state[p]
                    if "ax" not in state or n == 1:
                        state["ax"] = p.detach().clone()
                    else:
                        state["ax"].add_(p - state["ax"], alpha=1.0 / n)
        return None

    @contextmanager
    def averaged(self) -> Iterator[None]:
        """The averaged weights in the model for the duration (nothing when not averaging)."""
        swapped = []
        if self.averaging:
            for group in self.param_groups:
                for p in group["params"]:
                    ax = self.state[p].get("ax")
                    if ax is not None:
                        swapped.append((p, p.detach().clone()))
                        p.data.copy_(ax)
        try:
            yield
        finally:
            for p, kept in swapped:
                p.data.copy_(kept)


def clip_before_step(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    """Clip the gradients' global norm to `max_norm` before every step of `optimizer`."""
    params = [p for g in optimizer.param_groups for p in g["params"]]

    def hook(_opt: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        torch.nn.utils.clip_grad_norm_(params, max_norm)

    optimizer.register_step_pre_hook(hook)


@dataclass
class LengthScaledSchedule(Schedule):
    """The AWD-LSTM's rate: a linear warm-up to the peak, then constant, multiplied at each
    step by that step's sequence length over the mean length (`seq_len` / `bptt`: a
    shorter window's gradient averages fewer tokens, so it takes a shorter step). The
    trainer sets `seq_len` before the rate is read."""

    bptt: int = 70
    seq_len: int = 70

    def __call__(self, step: int) -> float:
        return Schedule.__call__(self, step) * self.seq_len / self.bptt


@dataclass
class CosineSchedule(Schedule):
    """nanoGPT's rate: linear warm-up to the peak, then a cosine down to `final_lr` at
    `total_steps`, constant after."""

    total_steps: int = 1
    final_lr: float = 0.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.start_lr + (self.peak_lr - self.start_lr) * step / self.warmup_steps
        span = max(self.total_steps - self.warmup_steps, 1)
        t = min((step - self.warmup_steps) / span, 1.0)
        return self.final_lr + 0.5 * (self.peak_lr - self.final_lr) * (1 + math.cos(math.pi * t))
