"""Synchronous SGD with an all-reduce of the gradients: the baseline every other algorithm
is compared with (Goyal et al., Accurate, large minibatch SGD, arXiv:1706.02677, 2017).

Each rank r computes the gradient g_r of its batch; the ranks sum g_r / K (the loss is
scaled by 1/K before backward) with an all-reduce, so every rank applies the same average

    x_{t+1} = x_t - lr * (1/K) sum_r g_r(x_t)

and the replicas stay identical. The all-reduce is allreduce_exchange.py's: flat after backward, or
in buckets started during backward (`--no-overlap`, `--bucket-mb`). Option `precision`:
fp32 (the default, today's exchange, bit for bit), fp16 or bf16: the gradients are cast
before the all-reduce and back after it (half the bytes; the sum is rounded to the
travelling type after each addition); the scalar slots stay fp32.

Bytes per step: (gradient elements) x (4 for fp32, 2 for fp16/bf16).
"""

from __future__ import annotations

from typing import Any

from mlbench_worker.algorithms.allreduce_exchange import (
    PRECISIONS,
    BucketedAllreduce,
    FlatAllreduce,
    choose,
)
from mlbench_worker.algorithms.interface import Parts


def build(
    parts: Parts, options: dict[str, Any], **settings: Any
) -> FlatAllreduce | BucketedAllreduce:
    """allreduce_exchange.choose with the precision asked for (settings: choose's keywords)."""
    dtype = PRECISIONS[options.get("precision", "fp32")]
    return choose(parts.grads, parts.comm, parts.comm.device, dtype=dtype, **settings)
