"""How one training step's gradients are exchanged between ranks.

The gradients live in training.comm.FlatGradients' one contiguous buffer (the trainer scales its
loss by 1/K before backward, so a sum over ranks is the average). An exchange sums that
buffer and has a small interface the trainer calls around backward: `begin()` before it
(zero the gradients, arm any hooks), `finish()` after it (return once every gradient is
summed, with the seconds of communication already hidden behind backward), `remove()`,
`describe()`, and `overlap` / `buckets` for the recorded configuration. Two exchanges
exist, with bitwise the same result on 2 ranks:

- `FlatAllreduce`: one all-reduce of the whole buffer after backward;
- `BucketedAllreduce` (the default for training with autograd): the buffer cut into a few
  contiguous buckets, each summed with a NON-blocking all-reduce as soon as backward has
  finished its gradients, so communication runs while backward computes the rest.

Both are the `allreduce` training algorithm (algorithms/allreduce.py) behind the
algorithms' interface (algorithms/interface.py: `Exchange`); with `dtype` fp16 or bf16 the
gradients travel cast (each bucket cast as it starts, cast back once summed) while the
scalar slots are summed in fp32 beside them. Which one a run uses is decided in one place,
training/build.py's exchange_gradients, through Trainer.set_algorithm.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from mlbench_worker.algorithms.interface import Exchange
from mlbench_worker.algorithms.wire import Wire, host_array, mpi_sum_op
from mlbench_worker.training.comm import Communicator, FlatGradients
from mlbench_worker.training.errors import WorkerError

# Default bucket size: at most DEFAULT_BUCKET_MB, and small enough for MIN_BUCKETS buckets.
# A fixed size alone fails small models: ResNet-20's gradients are 1.1 MB, one bucket at
# 4 MB, so nothing would overlap. The last bucket (the first layers' gradients, finished
# last by backward) is always exposed, so it should be small; at 8 buckets it holds an
# eighth of the gradients or less (ResNet-20: ~0.06 MB of 1.1 MB, as its early layers are
# thin). Measured in tests/benchmarks/bench_overlap.py.
DEFAULT_BUCKET_MB = 4.0
MIN_BUCKETS = 8


def default_bucket_bytes(total_bytes: int) -> int:
    """The bucket size for gradients of `total_bytes`: see DEFAULT_BUCKET_MB."""
    return max(1, min(int(DEFAULT_BUCKET_MB * 2**20), math.ceil(total_bytes / MIN_BUCKETS)))


@dataclass(frozen=True)
class Bucket:
    """Buffer elements start..stop: the gradients of `params` (FlatGradients.params indices)."""

    start: int
    stop: int
    params: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return (self.stop - self.start) * 4


def plan_buckets(numels: Sequence[int], bucket_bytes: int, head: int = 0) -> list[Bucket]:
    """Contiguous buckets of about `bucket_bytes`, in the order backward completes them.

    Parameters are walked from the last to the first (the order in which backward of a
    feed-forward model finishes their gradients) and a bucket closes once it holds at least
    `bucket_bytes`. A parameter is never split (a bigger one is a bucket by itself). The last
    bucket holds the first parameter and also the `head` elements before it (the scalar
    slots), so buckets tile the whole buffer and every element is summed exactly once.
    """
    if bucket_bytes <= 0:
        raise WorkerError(f"the bucket size must be positive, got {bucket_bytes} bytes")
    if not numels:
        raise WorkerError("no gradients to put into buckets: the model has no trainable parameter")
    offsets = np.concatenate(([0], np.cumsum(numels))) + head
    buckets: list[Bucket] = []
    stop, members, size = int(offsets[-1]), [], 0
    for i in reversed(range(len(numels))):
        members.append(i)
        size += numels[i] * 4
        if size >= bucket_bytes and i > 0:
            buckets.append(Bucket(int(offsets[i]), stop, tuple(members)))
            stop, members, size = int(offsets[i]), [], 0
    buckets.append(Bucket(0, stop, tuple(members)))
    return buckets


class _Allreduce(Exchange):
    """What both all-reduces share: the `allreduce` algorithm's attributes, its byte count
    (every gradient element once, in the travelling type) and the cast buffer."""

    name = "allreduce"

    def _setup(self, grads: FlatGradients, comm: Communicator, dtype: torch.dtype) -> None:
        self.grads, self.comm, self.dtype = grads, comm, dtype
        self.options = {"precision": PRECISION_NAMES[dtype]}
        self.wire = Wire(comm)
        self.grad_scale = 1.0 / comm.size if comm.size > 1 else 1.0
        self.keep_sent, self.last_sent = False, None
        self._bytes = grads.numel * torch.finfo(dtype).bits // 8 if comm.size > 1 else 0
        # fp16/bf16: the gradients' travelling copy (the scalar slots stay fp32).
        self.cast = (
            None
            if dtype == torch.float32
            else torch.zeros(grads.buffer.numel(), dtype=dtype, device=grads.buffer.device)
        )

    @property
    def comm_bytes(self) -> int:
        return self._bytes


PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PRECISION_NAMES = {v: k for k, v in PRECISIONS.items()}


class FlatAllreduce(_Allreduce):
    """One blocking all-reduce of the whole buffer after backward: no overlap.

    For trainers whose gradients do not come from autograd (task 2 writes closed-form
    gradients, so no hook would ever fire), one rank, or when overlap is switched off.
    """

    overlap = False

    def __init__(
        self, grads: FlatGradients, comm: Communicator, dtype: torch.dtype = torch.float32
    ) -> None:
        self._setup(grads, comm, dtype)
        self.buckets = [Bucket(0, grads.buffer.numel(), tuple(range(len(grads.params))))]

    def finish(self) -> float:
        """Sum the buffer; 0 seconds of communication happened before this call."""
        if self.cast is None:
            self.grads.allreduce_average_(self.comm, prescaled=True)
            return 0.0
        head = self.grads.head
        self.cast[head:].copy_(self.grads.grads)
        self.wire.allreduce_(self.grads.extra, count=False)
        self.wire.allreduce_(self.cast[head:], count=False)
        self.grads.grads.copy_(self.cast[head:])
        return 0.0

    def remove(self) -> None:
        pass

    def describe(self) -> str:
        return "one flat all-reduce after backward" + _travel(self.dtype)


def _travel(dtype: torch.dtype) -> str:
    return "" if dtype == torch.float32 else f", gradients sent as {PRECISION_NAMES[dtype]}"


class BucketedAllreduce(_Allreduce):
    """Sums the buffer bucket by bucket, each started as soon as backward completed it.

    A post-accumulate-grad hook on every parameter counts down its bucket; a complete bucket
    is started with a non-blocking all-reduce (mpi: ``Iallreduce`` on the numpy view of its
    range; gloo/nccl: ``all_reduce(async_op=True)``). Buckets start strictly in index order
    on every rank (a bucket ready early waits for its predecessors): MPI requires the same
    order of collectives everywhere, and a parameter that got no gradient on one rank must not
    reorder them. The last bucket (with the scalar slots, which the trainer sets after
    backward) and any bucket still incomplete start in `finish`, which waits for all of them.

    Bitwise equality with `FlatAllreduce`: each element is summed once, by the same
    operation; with 2 ranks that is one addition, a + b == b + a, whatever algorithm MPI or
    gloo picks for each message size. With more ranks the summation order may depend on the
    message size (tests/worker/test_buckets.py shows what holds), so results may differ in
    the last bit, while every rank still ends with the same values.

    MPI progress: Open MPI advances non-blocking collectives only inside MPI calls, so each
    hook tests the requests in flight (`poll`); that also observes when each bucket
    completed, which the "total communication" timing needs. `poll=False` exists to measure
    what polling buys (bench_overlap.py).

    A gradient accumulated into a bucket already in flight would race with its all-reduce:
    that (a second backward in one step) is refused with a clear error.
    """

    overlap = True

    def __init__(
        self,
        grads: FlatGradients,
        comm: Communicator,
        bucket_bytes: int | None = None,
        *,
        poll: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if comm.size < 2:
            raise WorkerError("bucketed all-reduce needs 2 or more ranks (one has nothing to sum)")
        if grads.buffer.device.type != "cpu" and comm._pg is None:
            raise WorkerError(MPI_CUDA_NO_OVERLAP)
        self._setup(grads, comm, dtype)
        self.poll = poll
        self.bucket_bytes = bucket_bytes or default_bucket_bytes(grads.numel * 4)
        self.buckets = plan_buckets(
            [p.numel() for p in grads.params], self.bucket_bytes, grads.head
        )
        if grads._host is not None and comm.mpi_data_plane:
            world, MPI = comm.world, comm.MPI
            ops = {t: mpi_sum_op(comm, t) for t in (torch.float32, dtype)}  # slots: fp32
            self._issue = lambda t: world.Iallreduce(MPI.IN_PLACE, host_array(t), op=ops[t.dtype])
            self._done = lambda h: h.Test()
            self._wait = MPI.Request.Waitall
        else:
            import torch.distributed as dist

            self._issue = lambda t: dist.all_reduce(t, async_op=True)
            self._done = lambda h: h.is_completed()
            self._wait = lambda handles: [h.wait() for h in handles]
        if self.cast is None:
            views = [grads.buffer[b.start : b.stop] for b in self.buckets]
            self._start = lambda i: [self._issue(views[i])]
        else:
            self._start = self._start_cast
        self._pending_init = [len(b.params) for b in self.buckets]
        owner = {i: b for b, bucket in enumerate(self.buckets) for i in bucket.params}
        self._hooks = [
            p.register_post_accumulate_grad_hook(partial(self._ready, i, owner[i]))
            for i, p in enumerate(grads.params)
        ]
        self._armed = False
        self._seen = bytearray(len(grads.params))
        self._pending = list(self._pending_init)
        self._next = 0  # buckets [0, _next) are started
        self._inflight: list = []  # started, completion not yet seen
        self._started: list = []
        self._busy = self._busy_since = 0.0

    def begin(self) -> None:
        """Zero the gradients and arm the hooks for this step's backward."""
        self.grads.zero_()
        self._seen = bytearray(len(self.grads.params))
        self._pending = list(self._pending_init)
        self._next = 0
        self._inflight, self._started = [], []
        self._busy = 0.0
        self._armed = True

    def _ready(self, index: int, bucket: int, _param: torch.Tensor) -> None:
        if not self._armed:  # a backward outside a training step: nothing to send
            return
        if self._seen[index]:
            if bucket < self._next:
                p = self.grads.params[index]
                raise WorkerError(
                    f"the gradient of parameter #{index} {tuple(p.shape)} was accumulated again "
                    "after its bucket's all-reduce had started (more than one backward in a "
                    "step?): that needs the flat all-reduce, --no-overlap"
                )
            return
        self._seen[index] = 1
        self._pending[bucket] -= 1
        last = len(self.buckets) - 1
        while self._next < last and self._pending[self._next] == 0:
            self._launch()
        if self.poll and self._inflight:
            self._inflight = [h for h in self._inflight if not self._done(h)]
            if not self._inflight:
                self._busy += time.perf_counter() - self._busy_since

    def _launch(self) -> None:
        if not self._inflight:
            self._busy_since = time.perf_counter()
        handles = self._start(self._next)
        self._inflight.extend(handles)
        self._started.extend(handles)
        self._next += 1

    def _start_cast(self, i: int) -> list:
        """Bucket i cast to the travelling type and started; the last bucket's scalar slots
        start beside it in fp32 (counts and loss sums must not lose digits)."""
        b, head = self.buckets[i], self.grads.head
        start = max(b.start, head)
        self.cast[start : b.stop].copy_(self.grads.buffer[start : b.stop])
        handles = [self._issue(self.cast[start : b.stop])]
        if b.start < head:
            handles.append(self._issue(self.grads.buffer[:head]))
        return handles

    def finish(self) -> float:
        """Start the buckets backward left, wait for all; return the seconds before this call
        during which at least one bucket was in flight (communication hidden behind compute).
        """
        if not self._armed:
            raise RuntimeError("BucketedAllreduce.finish() without begin()")
        now = time.perf_counter()
        hidden = self._busy + (now - self._busy_since if self._inflight else 0.0)
        while self._next < len(self.buckets):
            self._launch()
        self._armed = False
        self._wait(self._started)
        if self.cast is not None:
            head = self.grads.head
            self.grads.buffer[head:].copy_(self.cast[head:])
        return hidden

    def remove(self) -> None:
        """Take the hooks off the parameters (switching back to the flat all-reduce)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def describe(self) -> str:
        sizes = [b.nbytes / 2**20 for b in self.buckets]
        return (
            f"{len(self.buckets)} buckets of {min(sizes):.2f}-{max(sizes):.2f} MB "
            f"(target {self.bucket_bytes / 2**20:.2f} MB), overlapped with backward"
            + _travel(self.dtype)
        )


MPI_CUDA_NO_OVERLAP = (
    "overlapping the all-reduce with backward on CUDA needs --backend gloo or nccl: the mpi "
    "backend stages gradients through host memory, which would stall backward at every bucket"
)


def choose(
    grads: FlatGradients,
    comm: Communicator,
    device: torch.device,
    *,
    overlap: bool,
    bucket_mb: float | None = None,
    flat_only: str | None = None,
    task: str = "",
    previous: Exchange | None = None,
    note: Callable[[str], None] = lambda _line: None,
    dtype: torch.dtype = torch.float32,
) -> FlatAllreduce | BucketedAllreduce:
    """The exchange for a trainer's `grads`: buckets overlapped with backward, or flat.

    `bucket_mb`: the bucket size in MB (default: default_bucket_bytes); `dtype`: the type
    gradients travel in. Overlap silently
    stays off where it cannot apply and was not asked for explicitly: one rank, a trainer
    without autograd (`flat_only` says why); on CUDA with the mpi backend it stays off with
    a `note` line. An explicit `bucket_mb` that cannot take effect is an error, raised
    before the `previous` exchange is taken off the parameters.
    """
    if bucket_mb is not None and not (bucket_mb > 0 and math.isfinite(bucket_mb)):
        raise WorkerError(f"--bucket-mb must be a positive number of MB, got {bucket_mb!r}")
    if bucket_mb is not None and not overlap:
        raise WorkerError(
            "--bucket-mb sets the size of the buckets overlapped with backward: it cannot "
            "be combined with --no-overlap"
        )
    if bucket_mb is not None and flat_only:
        raise WorkerError(f"--bucket-mb does not apply to {task}: {flat_only}")
    mpi_on_cuda = device.type == "cuda" and comm.backend == "mpi"
    if bucket_mb is not None and mpi_on_cuda:
        raise WorkerError(f"--bucket-mb: {MPI_CUDA_NO_OVERLAP}")
    if previous is not None:
        previous.remove()
    if not overlap or flat_only or comm.size < 2:
        return FlatAllreduce(grads, comm, dtype)
    if mpi_on_cuda:
        note(f"note: flat gradient all-reduce, no overlap: {MPI_CUDA_NO_OVERLAP}")
        return FlatAllreduce(grads, comm, dtype)
    size = max(1, int(bucket_mb * 2**20)) if bucket_mb is not None else None
    return BucketedAllreduce(grads, comm, size, dtype=dtype)
