"""Communication between ranks: MPI for control, the chosen backend for gradients.

Every run starts under mpirun (or alone, as a single MPI process), so mpi4py's COMM_WORLD
always exists and carries the small control messages: barriers, agreeing on the data set,
broadcasting a checkpoint, gathering per-rank timings. The gradient all-reduce and the
initial parameter broadcast go through the backend the user asked for:

- ``mpi``: mpi4py ``Allreduce(MPI.IN_PLACE, ...)`` on the flat gradient buffer's numpy view
  (CPU memory; CUDA tensors are staged through a pinned host copy);
- ``gloo`` / ``nccl``: ``torch.distributed``, with the rendezvous derived from MPI: rank 0
  picks its address and a free port and broadcasts them over MPI.

Gradients live in ONE contiguous buffer (`FlatGradients`): each parameter's ``.grad`` is a
view into it, so backward writes straight into the buffer and in-place all-reduces average
every gradient (the trainer scales its loss by 1/K before backward, which makes the sum the
average without another pass over the buffer). How a training step sums that buffer (one
all-reduce, or buckets overlapped with backward) is algorithms/allreduce_exchange.py's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

import numpy as np
import torch

from mlbench_worker.shared.localhost import free_port
from mlbench_worker.training.errors import WorkerError

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
