"""PowerSGD: rank-r compression of each gradient matrix by one step of power iteration,
with error feedback and warm start (Vogels, Karimireddy, Jaggi: PowerSGD: Practical
low-rank gradient compression for distributed optimization, NeurIPS 2019; Algorithms 1
and 2).

Reference: the ecosystem's implementation by the paper's authors and PyTorch, torch's DDP
communication hook (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py,
`powerSGD_hook` with `PowerSGDState`), whose choices ours follow, option for option:
per-tensor matrices (not one bucket matrix), `matrix_approximation_rank` = `rank`,
`min_compression_rate` (the same name and rule), `start_powerSGD_iter` = `warmup_steps`,
error feedback and warm start on. tests/worker/test_algorithms_reference.py runs both on
gloo and bounds the difference.

Each gradient of a weight with 2 or more dimensions is viewed as a matrix M (n x m: out
channels x the rest, in the buffer's memory order); every rank r, every step:

    M_r   = G_r + E_r                    error feedback: add what was not applied before
    P_r   = M_r Q                        Q (m x r) is the same on every rank (warm start)
    P     = sum_r P_r                    all-reduce 1
    P^    = orthogonalise(P)             Gram-Schmidt on the columns
    Q_r   = M_r^T P^                     this rank's message
    Q     = sum_r Q_r                    all-reduce 2
    M^    = P^ Q^T                       what every rank applies: the average of the
                                         ranks' approximations (G_r is scaled by 1/K)
    E_r   = M_r - M^ / K                 the memory: this rank's part minus its share of
                                         what was applied (the hook's `input - decompressed`
                                         in its unscaled units)

and Q is kept for the next step (warm start: one power-iteration step per training step
refines the same subspace). The hook also orthogonalises the kept Q before P = M Q; the
Gram-Schmidt of M Q T equals that of M Q for any upper-triangular T with positive
diagonal, so that changes nothing but rounding, and ours skips it.

A matrix is compressed when r (n + m) x min_compression_rate < n m (the hook's
`_should_compress`); vectors (biases, batch-norm weights) and smaller matrices are
all-reduced uncompressed in all-reduce 1, with the trainer's scalar slots (not counted).
The hook keeps a memory for those too (its own gradient minus the average, which sums to
zero over ranks and so leaves the applied average unchanged); ours keeps none. Task 2's
model is one vector: PowerSGD sends it whole (compression ratio 1), as the paper
compresses matrices only.

Q starts from a normal draw seeded by the run's seed, equal on every rank. A column of Q
that comes back zero (a matrix whose gradient and memory were all zero) is redrawn from the
seeded generator, else P = M Q would keep that matrix from ever being updated again (the
hook's `orthogonalization_epsilon` guards the same case). Nothing overlaps with backward.

Warm-up (`warmup_steps`, the hook's `start_powerSGD_iter`): the first steps are a plain
fp32 all-reduce of every gradient, with no memory, as in the hook. The paper compresses
from the first step (its default here, 0); the hook's documentation advises deferring
compression for about 10 % of training, which the open division may set.

Bytes per step: sum over compressed matrices of r (n + m) x 4, plus 4 per uncompressed
element; during the warm-up 4 per gradient element.
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench_worker.algorithms.interface import Exchange, Parts

EPS = 1e-8


def orthogonalise(p: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt on the columns of `p`, in place (the paper's; deterministic, so ranks
    holding the same P get the same P^). A zero column stays (almost) zero."""
    for i in range(p.shape[1]):
        col = p[:, i : i + 1]
        col.div_(col.norm() + EPS)
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1 :]
            rest.sub_(col * (col * rest).sum(0, keepdim=True))
    return p


class PowerSgd(Exchange):
    """See the module docstring."""

    name = "powersgd"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        grads, rank = self.grads, int(options["rank"])
        self.min_rate = float(options.get("min_compression_rate", 2.0))
        self.warmup = int(options.get("warmup_steps", 0))
        self.steps = 0  # steps exchanged so far
        device = grads.buffer.device
        gen = self.gen = torch.Generator().manual_seed(parts.seed * 7919 + 17)
        # (start, n, m, r) of each compressed matrix; (start, stop) of each sent whole.
        self.matrices: list[tuple[int, int, int, int]] = []
        self.vectors: list[tuple[int, int]] = []
        for p, start in zip(grads.params, grads.offsets, strict=True):
            n = p.shape[0] if p.dim() >= 2 else p.numel()
            m = p.numel() // max(n, 1)
            r = min(rank, n, m)
            if p.dim() >= 2 and r * (n + m) * self.min_rate < n * m:
                self.matrices.append((start, n, m, r))
            else:
                self.vectors.append((start, start + p.numel()))
        head = grads.head
        whole = sum(b - a for a, b in self.vectors)
        p_size = sum(n * r for _, n, _, r in self.matrices)
        q_size = sum(m * r for _, _, m, r in self.matrices)
        self.first = torch.zeros(head + whole + p_size, device=device)  # slots, vectors, P's
        self.second = torch.zeros(q_size, device=device)  # Q's
        self.qs, self.ps, self.memory, self.q_local = [], [], [], []
        po, qo = head + whole, 0
        for _, n, m, r in self.matrices:
            self.ps.append(self.first[po : po + n * r].view(n, r))
            self.q_local.append(self.second[qo : qo + m * r].view(m, r))
            self.qs.append(torch.randn(m, r, generator=gen).to(device))
            self.memory.append(torch.zeros(n, m, device=device))
            po, qo = po + n * r, qo + m * r
        self.payload = (self.first.numel() - head + self.second.numel()) * 4

    def _matrix(self, start: int, n: int, m: int) -> torch.Tensor:
        return self.grads.buffer[start : start + n * m].view(n, m)

    def finish(self) -> float:
        self.steps += 1
        if self.steps <= self.warmup:  # the hook's vanilla all-reduce before compressing
            self.wire.allreduce_(self.grads.buffer)
            if self.comm.size > 1:
                self.wire.sent -= self.grads.head * 4  # the scalar slots are not counted
            if self.keep_sent:
                self.last_sent = self.grads.grads.clone()  # (tests) no memory in the warm-up
            return 0.0
        grads, head = self.grads, self.grads.head
        buf, first = grads.buffer, self.first
        own = grads.grads.clone() if self.keep_sent else None
        first[:head].copy_(grads.extra)
        o = head
        for a, b in self.vectors:
            first[o : o + b - a].copy_(buf[a:b])
            o += b - a
        for (start, n, m, _), mem, q, p in zip(
            self.matrices, self.memory, self.qs, self.ps, strict=True
        ):
            mem.add_(self._matrix(start, n, m))  # M_r = G_r + E_r, held in the memory
            torch.mm(mem, q, out=p)
        self.wire.allreduce_(first, count=False)
        if self.comm.size > 1:  # the vectors and P's count, the scalar slots do not
            self.wire.sent += (first.numel() - head) * 4
        grads.extra.copy_(first[:head])
        o = head
        for a, b in self.vectors:
            buf[a:b].copy_(first[o : o + b - a])
            o += b - a
        for mem, p, ql in zip(self.memory, self.ps, self.q_local, strict=True):
            orthogonalise(p)
            torch.mm(mem.t(), p, out=ql)
        self.wire.allreduce_(self.second)
        share = 1.0 / self.comm.size
        for (start, n, m, _), p, ql, q, mem in zip(
            self.matrices, self.ps, self.q_local, self.qs, self.memory, strict=True
        ):
            applied = torch.mm(p, ql.t(), out=self._matrix(start, n, m))  # M^ = P^ Q^T
            mem.sub_(applied, alpha=share)  # E_r = M_r - M^ / K
            q.copy_(ql)  # warm start
            self._revive(q)
        if own is not None:
            self.last_sent = self._record_sent(own)
        return 0.0

    def _revive(self, q: torch.Tensor) -> None:
        """A column of Q that came back zero (a matrix whose gradient and memory were all
        zero, e.g. a residual branch's last conv initialised to zero) would stay zero for
        good, since P = M Q: that matrix would never be updated again. It is redrawn from
        the run's seeded generator. Q is the same on every rank after its all-reduce, so
        every rank redraws the same columns with the same draws."""
        dead = q.norm(dim=0) < EPS
        if bool(dead.any()):
            fresh = torch.randn(q.shape[0], int(dead.sum()), generator=self.gen)
            q[:, dead] = fresh.to(q.device, q.dtype)

    def _record_sent(self, own: torch.Tensor) -> torch.Tensor:
        """What left this rank's error-corrected gradient, laid out like the gradients
        (tests): the vectors as they were, each matrix's share M^ / K of what was applied."""
        sent, head, share = own, self.grads.head, 1.0 / self.comm.size
        for start, n, m, _ in self.matrices:
            applied = self._matrix(start, n, m).reshape(-1)
            sent[start - head : start - head + n * m] = applied * share
        return sent

    def residual(self) -> torch.Tensor:
        """The memory kept for the next step, laid out like the gradients (0 where sent
        whole)."""
        out, head = torch.zeros_like(self.grads.grads), self.grads.head
        for (start, n, m, _), mem in zip(self.matrices, self.memory, strict=True):
            out[start - head : start - head + n * m] = mem.reshape(-1)
        return out

    def describe(self) -> str:
        kept = sum(n * m for _, n, m, _ in self.matrices)
        return (
            f"powersgd rank {self.options['rank']}: {len(self.matrices)} matrices compressed "
            f"({kept} elements), {len(self.vectors)} tensors sent whole"
        )


def build(parts: Parts, options: dict[str, Any]) -> PowerSgd:
    return PowerSgd(parts, options)
