"""PowerSGD: rank-r compression of each gradient matrix by one step of power iteration,
with error feedback and warm start (Vogels, Karimireddy, Jaggi: PowerSGD: Practical
low-rank gradient compression for distributed optimization, NeurIPS 2019; Algorithms 1
and 2).

Each gradient of a weight with 2 or more dimensions is viewed as a matrix M (n x m: out
channels x the rest, in the buffer's memory order); every rank r, every step:

    M_r   = G_r + E_r                    error feedback: add what was not sent before
    P_r   = M_r Q                        Q (m x r) is the same on every rank (warm start)
    P     = sum_r P_r                    all-reduce 1
    P^    = orthogonalise(P)             Gram-Schmidt on the columns
    Q_r   = M_r^T P^                     this rank's message
    Q     = sum_r Q_r                    all-reduce 2
    M^    = P^ Q^T = sum_r P^ Q_r^T      what every rank applies (the same everywhere)
    E_r   = M_r - P^ Q_r^T               the rest of this rank's M_r, kept for next step

and Q is kept for the next step (warm start: one power-iteration step per training step
refines the same subspace). G_r is already scaled by 1/K, so the sums are averages. The
memory E_r is in the same units; it is this rank's own message subtracted (the paper's
e_w = Delta_w - decompress(C(Delta_w))), so sent + kept = M_r exactly, up to rounding.

A column of Q that comes back zero (a matrix with an all-zero gradient and memory) is
redrawn from the seeded generator, else P = M Q would keep that matrix from ever being
updated again. The memory subtracts this rank's own P^ Q_r^T (the reference code subtracts
P^ Q^T, the average: the total error over ranks is the same).

Vectors (biases, batch-norm weights) and matrices too small to gain (r (n + m) >= n m) are
all-reduced uncompressed in all-reduce 1, with the trainer's scalar slots (not counted).
Task 2's model is one vector: PowerSGD sends it whole (compression ratio 1), as the paper
compresses matrices only. Q starts from a normal draw seeded by the run's seed, equal on
every rank. Nothing overlaps with backward.

Bytes per step: sum over compressed matrices of r (n + m) x 4, plus 4 per uncompressed
element.
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
        device = grads.buffer.device
        gen = self.gen = torch.Generator().manual_seed(parts.seed * 7919 + 17)
        # (start, n, m, r) of each compressed matrix; (start, stop) of each sent whole.
        self.matrices: list[tuple[int, int, int, int]] = []
        self.vectors: list[tuple[int, int]] = []
        for p, start in zip(grads.params, grads.offsets, strict=True):
            n = p.shape[0] if p.dim() >= 2 else p.numel()
            m = p.numel() // max(n, 1)
            r = min(rank, n, m)
            if p.dim() >= 2 and r * (n + m) < n * m:
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
        sent = self._record_sent(own) if own is not None else None
        for mem, p, ql in zip(self.memory, self.ps, self.q_local, strict=True):
            mem.addmm_(p, ql.t(), alpha=-1.0)  # E_r = M_r - P^ Q_r^T
        self.wire.allreduce_(self.second)
        for (start, n, m, _), p, ql, q in zip(
            self.matrices, self.ps, self.q_local, self.qs, strict=True
        ):
            torch.mm(p, ql.t(), out=self._matrix(start, n, m))  # M^ = P^ Q^T
            q.copy_(ql)  # warm start
            self._revive(q)
        self.last_sent = sent
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
        """This rank's message decompressed, laid out like the gradients (tests): the
        vectors as they were, each matrix as P^ Q_r^T."""
        sent, head = own, self.grads.head
        for (start, n, m, _), p, ql in zip(self.matrices, self.ps, self.q_local, strict=True):
            sent[start - head : start - head + n * m] = (p @ ql.t()).reshape(-1)
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
