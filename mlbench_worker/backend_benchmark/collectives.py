"""One object per measured backend: all-reduce and broadcast of a float32 message, and the
wait for the message to be complete on this rank.

- ``mpi``: mpi4py on the tensor's numpy view (``Allreduce(IN_PLACE)``, ``Bcast``), the same
  calls the training all-reduce makes (mlbench_worker/training/comm.py), on CPU memory;
- ``gloo`` (CPU) and ``nccl`` (this rank's GPU): ``torch.distributed``. One process group
  serves both when both are measured ("cpu:gloo,cuda:nccl": torch sends a CPU tensor through
  gloo and a CUDA tensor through nccl), set up with the training code's rendezvous: rank 0's
  address and a free port, agreed over MPI. nccl runs asynchronously on a CUDA stream, so its
  `complete` synchronises the device: the time then covers the transfer, not the launch.

The benchmark does not use `Communicator` itself: that class holds one backend for training,
while a sweep holds several at once. Messages are zeros: the sum of zeros stays zero however
often it is all-reduced, so no repeat ever meets an infinity or a denormal number.
"""

from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, field

import torch

from mlbench_worker.backend_benchmark.sizes import ELEMENT_BYTES
from mlbench_worker.training.comm import rendezvous_address
from mlbench_worker.training.errors import WorkerError


@dataclass
class Backend:
    """A backend's collectives on one preallocated buffer (the largest message)."""

    name: str
    device: torch.device
    buffer: torch.Tensor
    world: object  # mpi4py's COMM_WORLD
    _views: dict = field(default_factory=dict)

    def message(self, size: int) -> object:
        """The first `size` bytes of the buffer, in the form this backend's calls take."""
        if size not in self._views:
            tensor = self.buffer[: size // ELEMENT_BYTES]
            self._views[size] = tensor.numpy() if self.name == "mpi" else tensor
        return self._views[size]

    def run(self, op: str, message: object) -> None:
        """One collective on `message`, complete on this rank when it returns."""
        if self.name == "mpi":
            from mpi4py import MPI

            if op == "allreduce":
                self.world.Allreduce(MPI.IN_PLACE, message, op=MPI.SUM)
            else:
                self.world.Bcast(message, root=0)
            return
        import torch.distributed as dist

        if op == "allreduce":
            dist.all_reduce(message)
        else:
            dist.broadcast(message, src=0)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def default_backends(device: torch.device) -> list[str]:
    """Every backend this device offers: mpi and gloo, and nccl on a GPU."""
    return ["mpi", "gloo", "nccl"] if device.type == "cuda" else ["mpi", "gloo"]


def open_backends(
    names: list[str], world: object, device: torch.device, largest: int
) -> dict[str, Backend]:
    """The backends called `names`, each with a zeroed buffer of `largest` bytes."""
    if "nccl" in names and device.type != "cuda":
        raise WorkerError("backend nccl needs CUDA devices: measure mpi and gloo on CPU")
    torch_backends = [n for n in names if n in ("gloo", "nccl")]
    if torch_backends:
        _init_process_group(torch_backends, world)
    cpu = torch.device("cpu")
    buffers: dict[torch.device, torch.Tensor] = {}
    opened = {}
    for name in names:
        where = device if name == "nccl" else cpu
        if where not in buffers:
            buffers[where] = torch.zeros(
                largest // ELEMENT_BYTES, dtype=torch.float32, device=where
            )
        opened[name] = Backend(name, where, buffers[where], world)
    return opened


def close_backends(backends: dict[str, Backend]) -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    backends.clear()


def _init_process_group(names: list[str], world: object) -> None:
    import torch.distributed as dist

    hostnames = world.allgather(socket.gethostname())
    address = rendezvous_address(hostnames) if world.Get_rank() == 0 else None
    host, port = world.bcast(address, root=0)
    backend = "cpu:gloo,cuda:nccl" if len(names) == 2 else names[0]
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{host}:{port}",
        rank=world.Get_rank(),
        world_size=world.Get_size(),
        timeout=dt.timedelta(minutes=10),
    )
