"""Communication between ranks: MPI for control, the chosen backend for gradients.

Every run starts under mpirun (or alone, as a single MPI process), so mpi4py's COMM_WORLD
always exists and carries the small control messages: barriers, agreeing on the data set,
broadcasting a checkpoint, gathering per-rank timings. The gradient all-reduce and the
initial parameter broadcast go through the backend the user asked for:

- ``mpi``: mpi4py ``Allreduce(MPI.IN_PLACE, ...)`` on the flat gradient buffer's numpy view
  (CPU memory; CUDA tensors are staged through a pinned host copy);
- ``gloo`` / ``nccl``: ``torch.distributed``, with the rendezvous derived from MPI: rank 0
  picks its address and a free port and broadcasts them over MPI.

Gradients live in ONE contiguous buffer: each parameter's ``.grad`` is a view into it, so
backward writes straight into the buffer and in-place all-reduces average every gradient
(the trainer scales its loss by 1/K before backward, which makes the sum the average without
another pass over the buffer). Two ways to sum it, with bitwise the same result on 2 ranks:

- `FlatAllreduce`: one all-reduce of the whole buffer after backward;
- `BucketedAllreduce` (the default for training with autograd): the buffer cut into a few
  contiguous buckets, each summed with a NON-blocking all-reduce as soon as backward has
  finished its gradients, so communication runs while backward computes the rest.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from mlbench_worker.errors import WorkerError
from mlbench_worker.localhost import free_port

BACKENDS = ("mpi", "gloo", "nccl")


def _mpi():  # noqa: ANN202 - the mpi4py module
    from mpi4py import MPI

    return MPI


class Communicator:
    """One rank's view of the group: rank, size, and the collectives training needs."""

    def __init__(self, backend: str = "mpi", device: torch.device | None = None) -> None:
        if backend not in BACKENDS:
            raise WorkerError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        self.MPI = _mpi()
        self.world = self.MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self.backend = backend
        self.device = device or torch.device("cpu")
        self._pg = None
        self._host_stage: torch.Tensor | None = None
        if backend == "nccl" and self.device.type != "cuda":
            raise WorkerError("backend nccl needs CUDA devices: use --backend mpi or gloo on CPU")
        if backend in ("gloo", "nccl"):
            self._init_torch_distributed()
        # True when CPU tensors can go straight to MPI (mpi backend, more than one rank).
        self.mpi_data_plane = self._pg is None and self.size > 1

    # --- control plane (always MPI) -------------------------------------------------
    def barrier(self) -> None:
        self.world.Barrier()

    def bcast_object(self, obj: object, root: int = 0) -> object:
        return self.world.bcast(obj, root=root)

    def allgather_object(self, obj: object) -> list:
        return self.world.allgather(obj)

    def gather_object(self, obj: object, root: int = 0) -> list | None:
        return self.world.gather(obj, root=root)

    def allreduce_sums(self, values: Iterable[float]) -> np.ndarray:
        """Element-wise sum over ranks of a few float64 values (metrics, timings)."""
        buf = np.asarray(list(values), dtype=np.float64)
        if self.size > 1:
            self.world.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return buf

    def local_rank(self) -> int:
        return local_rank()

    # --- data plane (the chosen backend) --------------------------------------------
    def allreduce_(self, flat: torch.Tensor) -> None:
        """Sum `flat` over all ranks, in place."""
        if self.size == 1:
            return
        if self._pg is not None:
            torch.distributed.all_reduce(flat)
            return
        if flat.device.type == "cpu":
            self.world.Allreduce(self.MPI.IN_PLACE, flat.numpy(), op=self.MPI.SUM)
            return
        stage = self._stage(flat)
        stage.copy_(flat)
        self.world.Allreduce(self.MPI.IN_PLACE, stage.numpy(), op=self.MPI.SUM)
        flat.copy_(stage, non_blocking=True)

    def broadcast_(self, flat: torch.Tensor, root: int = 0) -> None:
        """Overwrite `flat` on every rank with rank `root`'s values."""
        if self.size == 1:
            return
        if self._pg is not None:
            torch.distributed.broadcast(flat, src=root)
            return
        if flat.device.type == "cpu":
            self.world.Bcast(flat.numpy(), root=root)
            return
        stage = self._stage(flat)
        stage.copy_(flat)
        self.world.Bcast(stage.numpy(), root=root)
        flat.copy_(stage)

    def _stage(self, flat: torch.Tensor) -> torch.Tensor:
        if self._host_stage is None or self._host_stage.numel() < flat.numel():
            self._host_stage = torch.empty(flat.numel(), dtype=flat.dtype, pin_memory=True)
        return self._host_stage[: flat.numel()].view_as(flat)

    def _init_torch_distributed(self) -> None:
        import datetime as dt

        import torch.distributed as dist

        address, port = None, None
        if self.rank == 0:
            address, port = rendezvous_address(self.allgather_object(socket.gethostname()))
        else:
            self.allgather_object(socket.gethostname())
        address, port = self.bcast_object((address, port))
        dist.init_process_group(
            backend=self.backend,
            init_method=f"tcp://{address}:{port}",
            rank=self.rank,
            world_size=self.size,
            timeout=dt.timedelta(minutes=10),
        )
        self._pg = dist.group.WORLD

    def close(self) -> None:
        if self._pg is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._pg = None

    def describe(self) -> str:
        return f"{self.backend} ({self.size} rank{'s' if self.size != 1 else ''})"


def local_rank() -> int:
    """This rank's index among the ranks on the same machine (it picks the GPU)."""
    env = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or os.environ.get("MPI_LOCALRANKID")
    if env is not None:
        return int(env)
    MPI = _mpi()
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def rendezvous_address(hostnames: list[str]) -> tuple[str, int]:
    """Rank 0's reachable address and a free port for torch.distributed's TCP store.

    MASTER_ADDR / MASTER_PORT win when set. All ranks on this host: loopback. Otherwise the
    address this host's name resolves to (a pod's IP on Kubernetes).
    """
    address = os.environ.get("MASTER_ADDR")
    if not address:
        local = all(h == hostnames[0] for h in hostnames)
        address = "127.0.0.1" if local else socket.gethostbyname(socket.gethostname())
    port = int(os.environ.get("MASTER_PORT", "0")) or free_port("")
    return address, port


class FlatGradients:
    """All gradients of `params` in one contiguous buffer, plus `extra` scalar slots.

    The extra slots ride along in the same all-reduce, so global sums (loss, correct
    predictions, images, a stop flag) cost no extra message per step. They sit at the START
    of the buffer, next to the first parameters' gradients: backward finishes those last, so
    the bucket that holds them is sent after backward anyway, and the slots (set after
    backward) join it without a message of their own.
    """

    def __init__(self, params: list[torch.nn.Parameter], extra: int = 0) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.numel = sum(p.numel() for p in self.params)
        self.head = extra  # the buffer's elements before the first gradient
        device = self.params[0].device
        if device.type == "cpu":
            # numpy's allocator asks Linux for huge pages on big arrays; MPI then copies
            # through fewer TLB misses than with torch's default allocation.
            self.buffer = torch.from_numpy(np.zeros(self.numel + extra, dtype=np.float32))
        else:
            self.buffer = torch.zeros(self.numel + extra, dtype=torch.float32, device=device)
        self._host = self.buffer.numpy() if device.type == "cpu" else None
        self.extra = self.buffer[:extra]
        self.grads = self.buffer[extra:]
        self.offsets: list[int] = []  # where each parameter's gradient starts in the buffer
        offset = extra
        for p in self.params:
            if p.dtype != torch.float32:
                raise WorkerError(f"parameters must be float32 for the flat buffer, got {p.dtype}")
            p.grad = _grad_view(self.buffer, p, offset)
            self.offsets.append(offset)
            offset += p.numel()

    def zero_(self) -> None:
        self.buffer.zero_()

    def intact(self) -> bool:
        """True while every .grad still points into the buffer (the optimizer must not replace them)."""
        base = self.buffer.data_ptr()
        end = base + self.buffer.numel() * 4
        return all(p.grad is not None and base <= p.grad.data_ptr() < end for p in self.params)

    def allreduce_average_(self, comm: Communicator, prescaled: bool = False) -> None:
        """Sum the whole buffer over ranks in place; the gradient part ends up averaged.

        `prescaled`: the loss was already multiplied by 1/K before backward, so the sum IS
        the average and no second pass over the buffer is needed (what the trainer does).
        """
        if self._host is not None and comm.mpi_data_plane:
            # The hot path: straight to MPI on the cached numpy view, nothing in between.
            comm.world.Allreduce(comm.MPI.IN_PLACE, self._host, op=comm.MPI.SUM)
        else:
            comm.allreduce_(self.buffer)
        if comm.size > 1 and not prescaled:
            self.grads.mul_(1.0 / comm.size)


def _grad_view(buffer: torch.Tensor, p: torch.Tensor, offset: int) -> torch.Tensor:
    """A slice of `buffer` shaped like `p` with p's strides (e.g. channels_last weights), so
    autograd accumulates into it directly instead of warning about the gradient layout."""
    dense = p.is_contiguous() or (
        p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
    )
    if dense:
        return buffer.as_strided(p.shape, p.stride(), buffer.storage_offset() + offset)
    return buffer[offset : offset + p.numel()].view_as(p)


# --- the gradient all-reduce of a training step ----------------------------------------
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


class FlatAllreduce:
    """One blocking all-reduce of the whole buffer after backward: no overlap.

    For trainers whose gradients do not come from autograd (task 2 writes closed-form
    gradients, so no hook would ever fire), one rank, or when overlap is switched off.
    """

    overlap = False

    def __init__(self, grads: FlatGradients, comm: Communicator) -> None:
        self.grads, self.comm = grads, comm
        self.buckets = [Bucket(0, grads.buffer.numel(), tuple(range(len(grads.params))))]

    def begin(self) -> None:
        self.grads.zero_()

    def finish(self) -> float:
        """Sum the buffer; 0 seconds of communication happened before this call."""
        self.grads.allreduce_average_(self.comm, prescaled=True)
        return 0.0

    def remove(self) -> None:
        pass

    def describe(self) -> str:
        return "one flat all-reduce after backward"


class BucketedAllreduce:
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
    ) -> None:
        if comm.size < 2:
            raise WorkerError("bucketed all-reduce needs 2 or more ranks (one has nothing to sum)")
        if grads.buffer.device.type != "cpu" and comm._pg is None:
            raise WorkerError(MPI_CUDA_NO_OVERLAP)
        self.grads, self.comm, self.poll = grads, comm, poll
        self.bucket_bytes = bucket_bytes or default_bucket_bytes(grads.numel * 4)
        self.buckets = plan_buckets(
            [p.numel() for p in grads.params], self.bucket_bytes, grads.head
        )
        if grads._host is not None and comm.mpi_data_plane:
            host = [grads._host[b.start : b.stop] for b in self.buckets]
            world, MPI = comm.world, comm.MPI
            self._start = lambda i: world.Iallreduce(MPI.IN_PLACE, host[i], op=MPI.SUM)
            self._done = lambda h: h.Test()
            self._wait = MPI.Request.Waitall
        else:
            import torch.distributed as dist

            views = [grads.buffer[b.start : b.stop] for b in self.buckets]
            self._start = lambda i: dist.all_reduce(views[i], async_op=True)
            self._done = lambda h: h.is_completed()
            self._wait = lambda handles: [h.wait() for h in handles]
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
        handle = self._start(self._next)
        self._inflight.append(handle)
        self._started.append(handle)
        self._next += 1

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
        )


MPI_CUDA_NO_OVERLAP = (
    "overlapping the all-reduce with backward on CUDA needs --backend gloo or nccl: the mpi "
    "backend stages gradients through host memory, which would stall backward at every bucket"
)


def broadcast_model(model: torch.nn.Module, comm: Communicator, root: int = 0) -> None:
    """Make every rank's parameters and buffers equal to rank `root`'s (one message each kind)."""
    if comm.size == 1:
        return
    tensors = [t for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()]
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
    comm.broadcast_(flat, root)
    _unflatten(flat, tensors)
    ints = [b for b in model.buffers() if not b.is_floating_point()]
    if ints:
        flat_i = torch.cat([b.reshape(-1).to(torch.float64) for b in ints])
        comm.broadcast_(flat_i, root)
        _unflatten(flat_i, ints)


def average_buffers(model: torch.nn.Module, comm: Communicator) -> None:
    """Average floating buffers (batch-norm statistics) so every rank evaluates the same model."""
    if comm.size == 1:
        return
    bufs = [b for b in model.buffers() if b.is_floating_point()]
    if not bufs:
        return
    flat = torch.cat([b.reshape(-1).float() for b in bufs])
    comm.allreduce_(flat)
    flat.mul_(1.0 / comm.size)
    _unflatten(flat, bufs)


def _unflatten(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view(t.shape).to(t.dtype))
            offset += n
