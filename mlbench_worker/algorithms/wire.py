"""The messages algorithms send, on every backend, and the bytes they count.

`Wire` wraps the run's Communicator with the few operations the algorithms need (an
all-reduce in fp32, fp16 or bf16, an all-gather of raw bytes, point-to-point exchanges with a
list of peers) and counts, in `sent`, the payload bytes this rank hands to them:

- an all-reduce of n elements counts n * itemsize (what the rank contributes; a ring
  implementation moves about twice that over the wire, a tree more, which is the library's
  business and the same for every algorithm that all-reduces);
- an all-gather counts the rank's own message (the others' copies are what it receives);
- a point-to-point exchange counts the message once per peer it is sent to.

One rank sends nothing: every count stays 0. `calls` records each operation (kind, bytes,
peers) so tests can see who talked to whom and which collectives a step used.

Two counts: `sent`, which the built-in algorithms may adjust (they take the trainer's scalar
slots out of a combined message), and `measured`, which only the wire's own operations
change. The trainer makes one Wire per run and hands it to the algorithm; for an algorithm
from outside mlbench (algorithms/registry.py) it reports `measured` and sets `strict`: then
`count=False` is honoured only for the trainer's own scalar slots (`exempt`), so an
algorithm cannot hide a message from the count by asking.

Backends: mpi (mpi4py on host memory; CUDA tensors are staged through the host), gloo and
nccl (torch.distributed). MPI has no 16-bit float type, so fp16/bf16 all-reduces use a
user-defined, commutative MPI operation that adds the 16-bit values with torch (rounded to
nearest-even after each addition, as gloo and nccl do).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mlbench_worker.training.comm import Communicator

TAG = 2117  # the tag of the algorithms' point-to-point messages (MPI)


def _half_op(dtype: torch.dtype):  # noqa: ANN202 - an mpi4py MPI.Op
    """The MPI operation that sums buffers of `dtype` (fp16 or bf16) stored as uint16."""
    from mpi4py import MPI

    def add(inbuf, inoutbuf, _datatype) -> None:  # noqa: ANN001 - mpi4py's buffers
        source = np.frombuffer(inbuf, dtype=np.uint16)
        target = np.frombuffer(inoutbuf, dtype=np.uint16)
        if source.size:
            a = torch.from_numpy(source.view(np.int16)).view(dtype)
            b = torch.from_numpy(target.view(np.int16)).view(dtype)
            b.add_(a)

    return MPI.Op.Create(add, commute=True)


_OPS: dict[torch.dtype, object] = {}


def mpi_sum_op(comm: Communicator, dtype: torch.dtype):  # noqa: ANN201 - an mpi4py MPI.Op
    """MPI.SUM for fp32, a user-defined sum for fp16 and bf16 (made once per process)."""
    if dtype == torch.float32:
        return comm.MPI.SUM
    if dtype not in _OPS:
        _OPS[dtype] = _half_op(dtype)
    return _OPS[dtype]


def host_array(t: torch.Tensor) -> np.ndarray:
    """A numpy view of CPU tensor `t` that MPI can take (16-bit floats as uint16)."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


class Wire:
    """The algorithms' messages on one rank, counted (see the module docstring)."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.sent = 0  # bytes since the last reset()
        self.measured = 0  # the same, changed by the operations only (see the docstring)
        self.calls: list[tuple[str, int, tuple[int, ...]]] = []
        self.record = False  # keep `calls` (tests)
        self.strict = False  # count everything but `exempt` (an outside algorithm's wire)
        self.exempt: torch.Tensor | None = None  # the trainer's scalar slots

    def reset(self) -> None:
        self.sent = 0
        self.measured = 0
        if self.record:
            self.calls = []

    def _uncounted(self, t: torch.Tensor) -> bool:
        """Whether an all-reduce asked not to be counted may go uncounted: always for the
        built-ins; in strict mode only the trainer's own scalar slots."""
        if not self.strict:
            return True
        e = self.exempt
        return e is not None and t.data_ptr() == e.data_ptr() and t.numel() <= e.numel()

    def _count(self, kind: str, nbytes: int, peers: tuple[int, ...] = ()) -> None:
        self.sent += nbytes
        self.measured += nbytes
        if self.record:
            self.calls.append((kind, nbytes, peers))

    @property
    def _torch(self) -> bool:
        return self.comm._pg is not None

    def allreduce_(self, t: torch.Tensor, *, count: bool = True) -> None:
        """Sum contiguous `t` (fp32, fp16 or bf16) over all ranks, in place.

        `count=False`: the trainer's scalar slots, which every algorithm sums and no
        comm_bytes counts."""
        comm = self.comm
        if comm.size == 1:
            return
        counted = count or not self._uncounted(t)
        self._count("allreduce", t.numel() * t.element_size() if counted else 0)
        if self._torch:
            import torch.distributed as dist

            dist.all_reduce(t)
            return
        host = t if t.device.type == "cpu" else t.cpu()
        comm.world.Allreduce(comm.MPI.IN_PLACE, host_array(host), op=mpi_sum_op(comm, t.dtype))
        if host is not t:
            t.copy_(host)

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's 1-D `t` (same size everywhere), stacked: shape (ranks, t.numel())."""
        comm = self.comm
        if comm.size == 1:
            return t.reshape(1, -1)
        self._count("allgather", t.numel() * t.element_size())
        if self._torch:
            import torch.distributed as dist

            parts = [torch.empty_like(t) for _ in range(comm.size)]
            dist.all_gather(parts, t.contiguous())
            return torch.stack(parts)
        host = t.contiguous().cpu()
        out = torch.empty((comm.size, t.numel()), dtype=t.dtype)
        comm.world.Allgather(host_array(host), host_array(out))
        return out.to(t.device)

    def exchange(
        self, peers: Sequence[int], send: torch.Tensor, receive: Sequence[torch.Tensor]
    ) -> None:
        """Send `send` to every rank of `peers` and receive `receive[i]` from peers[i],
        point to point only (each pair of ranks posts both directions at once, so no order
        of the calls can deadlock)."""
        if not peers:
            return
        self._count("p2p", send.numel() * send.element_size() * len(peers), tuple(peers))
        if self._torch:
            import torch.distributed as dist

            # One batch of all the sends and receives: NCCL needs them grouped (separate
            # calls block its stream and every rank would wait in its first receive).
            ops = [dist.P2POp(dist.irecv, r, p) for r, p in zip(receive, peers, strict=True)]
            ops += [dist.P2POp(dist.isend, send, p) for p in peers]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            return
        comm = self.comm
        host_send = send.cpu() if send.device.type != "cpu" else send
        host_receive = [r.cpu() if r.device.type != "cpu" else r for r in receive]
        requests = [
            comm.world.Irecv(host_array(r), source=p, tag=TAG)
            for r, p in zip(host_receive, peers, strict=True)
        ]
        requests += [comm.world.Isend(host_array(host_send), dest=p, tag=TAG) for p in peers]
        comm.MPI.Request.Waitall(requests)
        for r, h in zip(receive, host_receive, strict=True):
            if h is not r:
                r.copy_(h)
