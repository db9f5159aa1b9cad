"""Scaled sign compression with error feedback, EF-SignSGD (Karimireddy, Rebjock, Stich,
Jaggi: Error feedback fixes SignSGD and other gradient compression schemes, ICML 2019;
Algorithm 1, with the compressor C(p) = (||p||_1 / d) sign(p)).

Every rank r, every step, over the whole gradient vector (d elements):

    p_r   = g_r + e_r                         error feedback (g_r already scaled by 1/K)
    s_r   = ||p_r||_1 / d                      one fp32 scale
    b_r   = [p_r >= 0]                         one bit per entry (0 counts as +), packed
    Delta_r = s_r (2 b_r - 1)                  this rank's message, decompressed
    e_r   = p_r - Delta_r                      the memory
    g     = sum_r Delta_r                      all-gathered, summed in rank order: the
                                               average of the decompressed messages

The paper compresses the step lr * g; here the gradient is compressed and the optimizer
applies the learning rate (and momentum) after the exchange, so the memory is in gradient
units: the same for a constant rate, a small difference while the rate changes. The
trainer's scalar slots travel in the same all-gather (not counted). Nothing overlaps.

Bytes per step: ceil(d / 8) + 4.
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench_worker.algorithms.interface import Exchange, Parts

SHIFTS = torch.arange(7, -1, -1, dtype=torch.uint8)  # numpy.packbits' order: first bit high


def pack(bits: torch.Tensor) -> torch.Tensor:
    """Booleans to bytes, 8 per byte, the first in the high bit (numpy.packbits), on any
    device; the last byte padded with zeros."""
    pad = (-bits.numel()) % 8
    b = torch.nn.functional.pad(bits.to(torch.uint8), (0, pad)).view(-1, 8)
    return (b << SHIFTS.to(b.device)).sum(1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, d: int) -> torch.Tensor:
    """The first `d` booleans of `pack`'s bytes."""
    return ((packed[:, None] >> SHIFTS.to(packed.device)) & 1).view(-1)[:d].bool()


class SignSgd(Exchange):
    """See the module docstring."""

    name = "signsgd"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        d, device = self.grads.numel, self.grads.buffer.device
        self.memory = torch.zeros(d, device=device)
        self.header = torch.zeros(self.grads.head + 1, device=device)  # slots, then the scale
        self.hbytes = self.header.numel() * 4

    def finish(self) -> float:
        grads, head, d = self.grads, self.grads.head, self.grads.numel
        mem = self.memory
        mem.add_(grads.grads)  # p_r = g_r + e_r
        scale = mem.abs().sum() / d
        bits = mem >= 0
        sent = torch.where(bits, scale, -scale)
        mem.sub_(sent)  # e_r = p_r - Delta_r
        if self.keep_sent:
            self.last_sent = sent
        self.header[:head] = grads.extra
        self.header[head] = scale
        message = torch.cat([self.header.view(torch.uint8), pack(bits)])
        everyone = self.wire.allgather(message)
        if self.comm.size > 1:
            self.wire.sent -= self.hbytes - 4  # the slots are not counted, the scale is
        grads.buffer.zero_()
        for row in everyone:  # rank order: the same sums on every rank
            header = row[: self.hbytes].clone().view(torch.float32)
            grads.extra.add_(header[:head])
            s = header[head]
            grads.grads.add_(torch.where(unpack(row[self.hbytes :], d), s, -s))
        return 0.0

    def residual(self) -> torch.Tensor:
        """The memory kept for the next step (what was not sent)."""
        return self.memory

    def describe(self) -> str:
        return f"signsgd: 1 bit per entry ({self.grads.numel} entries) and one scale"


def build(parts: Parts, options: dict[str, Any]) -> SignSgd:
    return SignSgd(parts, options)
