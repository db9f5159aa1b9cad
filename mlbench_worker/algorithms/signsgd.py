"""Scaled sign compression with error feedback, EF-SignSGD (Karimireddy, Rebjock, Stich,
Jaggi: Error feedback fixes SignSGD and other gradient compression schemes, ICML 2019;
Algorithm 1, EF-SGD with the compressor C(p) = (||p||_1 / d) sign(p)).

Reference: the authors' optimizer (github.com/epfml/error-feedback-SGD,
optimizers/ErrorFeedbackSGD.py, used by main.py). It works PER PARAMETER TENSOR and
compresses the optimizer's UPDATE: for each tensor x with gradient g and memory e,

    d   = g + wd x                             weight decay, then momentum as torch's SGD:
    b   = mu b + (1 - dampening) d  (b = d at the first step);  d = b (or d + mu b, Nesterov)
    p   = lr d + e                             the learning-rate-scaled step, plus the memory
    s   = ||p||_1 / numel(x)                   one fp32 scale per tensor
    D   = s sign(p)                            (0 counts as +)
    e   = p - D                                the memory: what was not applied
    x   = x - D

Distributed over K ranks (each rank its own gradient, momentum and memory, as workers of
the paper's analysis), every rank sends its signs (1 bit each, packed) and its scales, all
ranks all-gather them, and each applies the average of the decompressed steps,
x <- x - (1/K) sum_r D_r, summed in rank order so every rank gets the same bits. The
algorithm applies that step itself (Exchange.step): the optimizer's momentum, weight
decay and rate were used before compression and are not applied a second time. With
K = 1 this is the authors' optimizer exactly. The trainer's scalar slots travel in the
same all-gather (not counted). Nothing overlaps with backward.

The authors' experiments ran EF-SignSGD with momentum 0 and weight decay 5e-4 and a
learning rate tuned per model (utils/hyperparameters.py, tune_lr.py); the tuned values are
not published in the code. The default follows them on momentum (`momentum none`: the
optimizer's momentum is not used) and takes the rate, its schedule and the weight decay
from the run's optimizer (the task's recipe); `momentum task` puts the task's momentum
inside the compressed step, as the authors' optimizer allows. Measured on task 1a's
generated set (docs/results.rst): 11 epochs to 80 % without momentum, 18 with the task's.

`compress step` needs the task's optimizer to be torch's SGD with nothing hooked to its
step (tasks 1a, 1b and 2); a task whose optimizer is another (Adam, an averaged SGD,
gradient clipping in a step hook) is refused with a message naming `compress gradient`.

Departures kept on purpose, as options (the reference is the default):

- `scale model`: ONE scale over the whole gradient vector (mlbench's first version). A
  ResNet's layers have gradients orders of magnitude apart; one scale gives small layers
  huge steps and large ones tiny steps (measured: an erratic curve on task 1a). Kept to
  show that difference.
- `compress gradient`: compress the error-corrected GRADIENT (scaled by 1/K), exchange it,
  and let the optimizer apply rate, momentum and weight decay after the exchange
  (mlbench's first version, and the layout of PowerSGD's distributed EF-SGD with momentum).
  The memory is then in gradient units.

Bytes per step: ceil(d / 8) + 4 T, with d gradient elements and T scales (T = the number
of parameter tensors, or 1 with `scale model`).
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench_worker.algorithms.interface import Exchange, Parts
from mlbench_worker.training.errors import WorkerError

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


def flat_view(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements in memory order, as the flat gradient buffer lays them out (a dense
    tensor, channels_last included)."""
    return t.detach().as_strided((t.numel(),), (1,))


class SignSgd(Exchange):
    """See the module docstring."""

    name = "signsgd"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        grads = self.grads
        d, device = grads.numel, grads.buffer.device
        self.on_step = options.get("compress", "step") == "step"
        self.use_momentum = options.get("momentum", "none") == "task"
        per_tensor = options.get("scale", "tensor") == "tensor"
        sizes = [p.numel() for p in grads.params] if per_tensor else [d]
        self.segments = torch.tensor(sizes, dtype=torch.float32, device=device)
        self.segment_of = torch.repeat_interleave(
            torch.arange(len(sizes), device=device), torch.tensor(sizes, device=device)
        )
        self.memory = torch.zeros(d, device=device)
        self.header = torch.zeros(grads.head + len(sizes), device=device)  # slots, scales
        self.hbytes = self.header.numel() * 4
        if self.on_step:
            _check_plain_sgd(parts.optimizer)
            self.grad_scale = 1.0  # each rank's own gradient, as each worker's optimizer sees it
            self.momenta: list[torch.Tensor | None] = [None] * len(grads.params)
            self.groups = _groups_of(grads.params, parts.optimizer)

    def finish(self) -> float:
        grads, head, d = self.grads, self.grads.head, self.grads.numel
        if self.on_step:
            self._momentum_step()  # grads.grads <- lr * (the optimizer's update)
        mem = self.memory
        mem.add_(grads.grads)  # p_r = (step or gradient) + e_r
        sums = torch.zeros_like(self.segments).index_add_(0, self.segment_of, mem.abs())
        scales = sums / self.segments
        bits = mem >= 0
        sent = torch.where(bits, 1.0, -1.0).mul_(scales[self.segment_of])
        mem.sub_(sent)  # e_r = p_r - Delta_r
        if self.keep_sent:
            self.last_sent = sent
        self.header[:head] = grads.extra
        self.header[head:] = scales
        message = torch.cat([self.header.view(torch.uint8), pack(bits)])
        everyone = self.wire.allgather(message)
        if self.comm.size > 1:
            self.wire.sent -= head * 4  # the slots are not counted, the scales are
        grads.buffer.zero_()
        for row in everyone:  # rank order: the same sums on every rank
            header = row[: self.hbytes].clone().view(torch.float32)
            grads.extra.add_(header[:head])
            signs = torch.where(unpack(row[self.hbytes :], d), 1.0, -1.0)
            grads.grads.add_(signs.mul_(header[head:][self.segment_of]))
        if self.on_step and self.comm.size > 1:
            grads.grads.mul_(1.0 / self.comm.size)  # the average of the ranks' steps
        return 0.0

    def _momentum_step(self) -> None:
        """Replace each gradient by the optimizer's update times its rate (torch SGD's
        weight decay, momentum, dampening and Nesterov), in place, keeping the momentum."""
        for i, (p, start) in enumerate(zip(self.grads.params, self.grads.offsets, strict=True)):
            group = self.groups[i]
            g = self.grads.buffer[start : start + p.numel()]
            if group["weight_decay"]:
                g.add_(flat_view(p), alpha=group["weight_decay"])
            mu = group["momentum"] if self.use_momentum else 0.0
            if mu:
                buf = self.momenta[i]
                if buf is None:
                    buf = self.momenta[i] = g.clone()
                else:
                    buf.mul_(mu).add_(g, alpha=1.0 - group["dampening"])
                if group["nesterov"]:
                    g.add_(buf, alpha=mu)
                else:
                    g.copy_(buf)
            g.mul_(group["lr"])

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """`compress step`: x <- x - the averaged decompressed step (rate, momentum and weight
        decay are already in it); `compress gradient`: the optimizer's step."""
        if not self.on_step:
            optimizer.step()
            return
        with torch.no_grad():
            for p, start in zip(self.grads.params, self.grads.offsets, strict=True):
                flat_view(p).sub_(self.grads.buffer[start : start + p.numel()])

    def residual(self) -> torch.Tensor:
        """The memory kept for the next step (what was not sent)."""
        return self.memory

    def describe(self) -> str:
        return (
            f"signsgd: 1 bit per entry ({self.grads.numel} entries) and "
            f"{self.segments.numel()} scales, compressing the "
            f"{'momentum step' if self.on_step else 'gradient'}"
        )


def _check_plain_sgd(optimizer: torch.optim.Optimizer | None) -> None:
    """`compress step` replaces the optimizer's step by EF-SGD's, which is momentum SGD's: an
    optimizer that does more in its step (Adam's moments, an averaged SGD's running mean, a
    hook that clips the gradients first) would silently lose it, so it is refused."""
    if optimizer is None:
        return
    hooks = getattr(optimizer, "_optimizer_step_pre_hooks", None) or getattr(
        optimizer, "_optimizer_step_post_hooks", None
    )
    if type(optimizer) is not torch.optim.SGD or hooks:
        what = type(optimizer).__name__ + (" with step hooks" if hooks else "")
        raise WorkerError(
            f"--algorithm signsgd compresses momentum SGD's step (compress step), and this "
            f"task's optimizer is {what}: use --algorithm-option compress=gradient"
        )


def _groups_of(params: list[torch.Tensor], optimizer: torch.optim.Optimizer | None) -> list[dict]:
    """Each parameter's optimizer group (rate, momentum, weight decay...): plain SGD at rate 1
    without an optimizer."""
    plain = {"lr": 1.0, "momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0}
    if optimizer is None:
        return [plain] * len(params)
    owner = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    return [owner.get(id(p), plain) for p in params]


def build(parts: Parts, options: dict[str, Any]) -> SignSgd:
    return SignSgd(parts, options)
