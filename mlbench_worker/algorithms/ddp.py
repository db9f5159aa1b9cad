"""The torch-ddp implementation: the reference loop with PyTorch's DistributedDataParallel.

Everything but the gradient exchange is the reference loop's (training/trainer.py: the same
model, shards, augmentation, schedule, goal tracking and metrics), so a run of each
implementation on the same data differs only in who all-reduces the gradients: our
exchange (allreduce_exchange.py) or DDP's reducer, with its own buckets (`bucket_cap_mb`, from
--bucket-mb when given), its own overlap with backward and its own averaging. The model is
wrapped the way users write it (`DistributedDataParallel(model)` on the process group that
training.comm.Communicator initialised from the ranks mpirun started: gloo on CPU, nccl on GPU); the
only additions are what the benchmark must measure, none of which changes what DDP does:

- a post-accumulate-grad hook on every parameter notes when backward produced the last
  gradient; DDP's backward returns only once every bucket is all-reduced, so the time from
  that note to backward's return is communication the step waited for (exposed), which
  the trainer books as communication, not compute (`waited_in_backward`);
- precision fp16 or bf16 (the allreduce option) registers DDP's own compression hooks
  (torch.distributed.algorithms.ddp_comm_hooks.default_hooks), as a user would.

What is not observable without replacing DDP's C++ all-reduce hook by a Python one is the
communication hidden behind backward: comm_total counts the exposed part only for this
implementation (docs/tasks.rst says so). The trainer's scalar slots (loss, hits, images,
stop and report flags) are not parameters, so they are summed beside DDP, as every
algorithm sums them (Exchange.sum_scalars, not counted in comm_bytes).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from mlbench_worker.algorithms.interface import Exchange, Parts
from mlbench_worker.training.errors import WorkerError

BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


class DdpExchange(Exchange):
    """Synchronous SGD with the gradients averaged by DistributedDataParallel."""

    name = "allreduce"
    overlap = True

    def __init__(self, parts: Parts, options: dict[str, Any], bucket_mb: float | None) -> None:
        super().__init__(parts, options)
        if not dist.is_initialized():
            raise WorkerError(
                "--implementation torch-ddp needs a torch.distributed backend: use --backend "
                "gloo (CPU) or nccl (GPU)"
            )
        self.grad_scale = 1.0  # DDP averages the gradients itself
        self.precision = options.get("precision", "fp32")
        device = parts.comm.device
        self.ddp = DistributedDataParallel(
            parts.model,
            device_ids=[device.index] if device.type == "cuda" else None,
            **({"bucket_cap_mb": bucket_mb} if bucket_mb is not None else {}),
        )
        self.train_module = self.ddp
        self.bucket_bytes = int((bucket_mb or 25.0) * 2**20)  # DDP's default cap is 25 MB
        if self.precision != "fp32":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            hook = {
                "fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook,
            }[self.precision]
            self.ddp.register_comm_hook(None, hook)
        params = [p for p in parts.model.parameters() if p.requires_grad]
        self.step_bytes = sum(p.numel() for p in params) * BYTES[self.precision]
        self.last_ready = 0.0
        self.waited_in_backward = 0.0
        self._hooks = [p.register_post_accumulate_grad_hook(self._ready) for p in params]

    def _ready(self, _param: torch.Tensor) -> None:
        self.last_ready = time.perf_counter()

    def begin(self) -> None:
        super().begin()
        self.waited_in_backward = 0.0

    def finish(self) -> float:
        """Backward has returned, so DDP's all-reduce is done; sum the scalar slots."""
        if self.last_ready:
            self.waited_in_backward = max(0.0, time.perf_counter() - self.last_ready)
        if self.comm.size > 1:
            self.wire.sent += self.step_bytes
            self.sum_scalars()
        return 0.0

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def describe(self) -> str:
        travel = "" if self.precision == "fp32" else f", gradients sent as {self.precision}"
        return (
            f"DistributedDataParallel ({self.comm.backend}, buckets of at most "
            f"{self.bucket_bytes / 2**20:g} MB, overlapped with backward{travel})"
        )


def replace(
    previous: Exchange | None,
    parts: Parts,
    name: str,
    options: dict[str, Any],
    overlap: bool,
    bucket_mb: float | None,
    flat_only: str | None,
) -> DdpExchange:
    """The DDP exchange of `parts.model` in place of `previous` (options: the allreduce
    algorithm's, checked); what DDP cannot do is refused by the option that asks for it."""
    if name != "allreduce":
        raise WorkerError(f"--implementation torch-ddp runs allreduce only, not {name}")
    if not overlap or flat_only:
        raise WorkerError(
            "--implementation torch-ddp always overlaps its all-reduce with backward: "
            + (flat_only or "drop --no-overlap")
        )
    if previous is not None:
        previous.remove()
    return DdpExchange(parts, options, bucket_mb)
