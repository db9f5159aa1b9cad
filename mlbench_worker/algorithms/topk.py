"""Top-k sparsified SGD with memory (Stich, Cordonnier, Jaggi: Sparsified SGD with memory,
NeurIPS 2018; Algorithm 1, "mem-SGD", distributed as in their Section 5 and in Alistarh et
al. 2018's sparsified all-gather).

Every rank r, every step, over the whole gradient vector (d elements, all layers, as the
paper's single vector; Stich et al.'s code, github.com/epfml/sparsifiedSGD, is the same
loop on one machine):

    p_r   = lr g_r + e_r                  error feedback on the learning-rate-scaled step
                                          (g_r already scaled by 1/K)
    S_r   = the k = ceil(density * d) indices of the largest |p_r|
    send  (p_r[S_r], S_r)                 k fp32 values and k int32 indices, all-gathered
    e_r   = p_r with S_r set to 0         the memory: exactly what was not applied
    g     = sum_r scatter(S_r, p_r[S_r]) / lr
                                          handed to the optimizer, summed in rank order,
                                          so every rank gets the same bits

With plain SGD the optimizer's step lr g is exactly the paper's x <- x - sum_r comp(p_r),
whatever the schedule does to the rate (the memory holds steps, not gradients, as in the
paper). The paper has no momentum; with the task's momentum SGD the optimizer applies
momentum and weight decay to the exchanged g (the layout of Vogels et al.'s distributed
EF-SGD with momentum, PowerSGD's Algorithm 2, whose reference hook works the same way). A rate of 0 (none of the tasks has one) is taken as 1 for that step.

The trainer's scalar slots travel in the same all-gather (fp32, summed in rank order, not
counted). Nothing overlaps with backward.

Bytes per step: 8k (4 per value, 4 per index); with density 1 that is twice a full
all-reduce's, which the compression ratio then shows (0.5).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mlbench_worker.algorithms.interface import Exchange, Parts


class TopK(Exchange):
    """See the module docstring."""

    name = "topk"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        d = self.grads.numel
        self.k = max(1, min(d, math.ceil(float(options["density"]) * d)))
        self.memory = torch.zeros(d, device=self.grads.buffer.device)
        head = self.grads.head
        self.message = torch.zeros(head + 2 * self.k, dtype=torch.int32, device=self.memory.device)

    def finish(self) -> float:
        grads, head, k = self.grads, self.grads.head, self.k
        mem, msg = self.memory, self.message
        rate = self._rate()
        mem.add_(grads.grads, alpha=rate)  # p_r = lr g_r + e_r
        chosen = mem.abs().topk(k, sorted=False).indices
        values = mem[chosen]
        mem[chosen] = 0.0  # e_r: what was not sent
        msg[:head] = grads.extra.view(torch.int32)
        msg[head : head + k] = values.view(torch.int32)
        msg[head + k :] = chosen.to(torch.int32)
        if self.keep_sent:
            self.last_sent = torch.zeros_like(mem).index_put_((chosen,), values)
        everyone = self.wire.allgather(msg)
        if self.comm.size > 1:
            self.wire.sent -= head * 4  # the scalar slots are not counted
        grads.buffer.zero_()
        for row in everyone:  # rank order: the same sums on every rank
            grads.extra.add_(row[:head].view(torch.float32))
            grads.grads.index_add_(
                0, row[head + k :].long(), row[head : head + k].view(torch.float32)
            )
        if rate != 1.0:
            grads.grads.mul_(1.0 / rate)  # back to gradient units for the optimizer
        return 0.0

    def _rate(self) -> float:
        """This step's learning rate (the trainer sets it before `finish`); 1 without an
        optimizer or at a rate of 0."""
        optimizer = self.parts.optimizer
        lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else 1.0
        return lr if lr > 0 else 1.0

    def residual(self) -> torch.Tensor:
        """The memory kept for the next step (what was not sent)."""
        return self.memory

    def describe(self) -> str:
        return f"topk density {self.options['density']:g}: {self.k} of {self.grads.numel} entries"


def build(parts: Parts, options: dict[str, Any]) -> TopK:
    return TopK(parts, options)
