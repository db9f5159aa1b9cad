"""Random-k sparsification with error feedback, written against the public algorithm
interface only: the outside algorithm the end-to-end and Slurm tests upload (each under a
NAME of its own). Every rank draws the same k indices from the run's seed and sums its
error-corrected gradient there, one all-reduce of k fp32 values per step (4k bytes on the
wire; the scalar slots free)."""

from __future__ import annotations

import hashlib

_SOURCE = """
import torch

from mlbench_worker.algorithms.public import Algorithm, Option

NAME = "{name}"
API = 1
OPTIONS = (
    Option("density", "float", 0.25, "fraction of entries sent", above=0.0, maximum=1.0),
)


class RandK(Algorithm):
    def __init__(self, parts, options):
        super().__init__(parts, options)
        self.k = max(1, int(options["density"] * self.grads.numel))
        self.memory = torch.zeros(self.grads.numel)
        self.gen = torch.Generator().manual_seed(parts.seed)

    def finish(self) -> float:
        self.sum_scalars()
        g = self.grads.grads
        self.memory.add_(g)
        chosen = torch.randperm(g.numel(), generator=self.gen)[: self.k]
        values = self.memory[chosen].clone()
        self.memory[chosen] = 0.0
        self.wire.allreduce_(values)
        g.zero_()
        g[chosen] = values
        return 0.0
"""


def randk_source(name: str) -> tuple[bytes, str]:
    """The module's source under NAME `name`, and its SHA-256 (hex)."""
    source = _SOURCE.format(name=name).encode()
    return source, hashlib.sha256(source).hexdigest()
