"""Decentralized parallel SGD, D-PSGD (Lian, Zhang, Zhang, Hsieh, Zhang, Liu: Can
decentralized algorithms outperform centralized algorithms? A case study for decentralized
parallel stochastic gradient descent, NeurIPS 2017; Algorithm 1).

Reference: the paper's Algorithm 1 as written (gossip on the models with a symmetric,
doubly stochastic W, then the local gradient step; nothing compressed). The paper's
experiments use a ring, the default here.

Every rank i, every step k, with W the mixing matrix of the topology:

    g_i   = gradient of rank i's batch at its own model x_i        (no gradient exchange)
    x_i  <- sum_j W_ij x_j - lr * g_i                               (gossip, then the step)

The gossip happens in `finish` (after backward, before the optimizer's step), so the
gradient is the one at the model before mixing, as in the paper. W is uniform over the
closed neighbourhood: W_ij = 1 / (1 + deg) for j = i and each neighbour j. Both topologies
are regular graphs, so these are also the Metropolis-Hastings weights 1 / (1 + max(deg_i,
deg_j)), and W is symmetric and doubly stochastic.

- ring: left and right neighbours (with 2 ranks, the one other rank: weight 1/2 each);
- torus: the four neighbours on a rows x cols grid (algorithm_catalogue.torus_shape,
  at least 3 x 3 so the four are different), rank = row * cols + column.

Each rank sends its model (parameters and floating buffers) to each neighbour and receives
theirs, point to point only (wire.Wire.exchange: MPI Isend/Irecv, or torch.distributed
isend/irecv on gloo/nccl); no global collective carries models or gradients during
training. The trainer's scalar slots are still summed over all ranks (a 20-byte all-reduce,
not counted), so ranks agree on loss, progress and when to stop. Evaluation sees the
average of the replicas (interface.AveragedForEvaluation); a checkpoint holds rank 0's model.
The optimizer's momentum stays local.

Bytes per step: 4 x (parameters + floating buffers) x (number of neighbours).
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench_worker.algorithms.interface import AveragedForEvaluation, Parts
from mlbench_worker.shared.algorithm_catalogue import torus_shape
from mlbench_worker.training.errors import WorkerError


def neighbours(rank: int, size: int, topology: str) -> list[int]:
    """The ranks `rank` gossips with, sorted (the order every sum runs in)."""
    if topology == "ring":
        return sorted({(rank - 1) % size, (rank + 1) % size} - {rank})
    shape = torus_shape(size)
    if shape is None:
        raise WorkerError(f"topology torus cannot be formed by {size} workers; use ring")
    rows, cols = shape
    i, j = divmod(rank, cols)
    return sorted(
        {((i - 1) % rows) * cols + j, ((i + 1) % rows) * cols + j}
        | {i * cols + (j - 1) % cols, i * cols + (j + 1) % cols}
    )


class Decentralized(AveragedForEvaluation):
    """See the module docstring."""

    name = "decentralized"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        self.topology = options["topology"]
        self.peers = neighbours(self.comm.rank, self.comm.size, self.topology)
        self.weight = 1.0 / (1 + len(self.peers))
        self.inbox = [torch.empty_like(self.vector.flat) for _ in self.peers]

    def finish(self) -> float:
        self.sum_scalars()
        self.gossip()
        return 0.0

    def gossip(self) -> None:
        """x_i <- W_ii x_i + sum_j W_ij x_j over the neighbours j (point to point)."""
        if not self.peers:
            return
        own = self.vector.pack()
        self.wire.exchange(self.peers, own, self.inbox)
        for theirs in self.inbox:  # in the order of `peers`
            own.add_(theirs)
        own.mul_(self.weight)
        self.vector.unpack(own)

    def describe(self) -> str:
        return f"decentralized {self.topology}: gossip with ranks {self.peers}"


def build(parts: Parts, options: dict[str, Any]) -> Decentralized:
    return Decentralized(parts, options)
