"""What a result must carry to be reproducible: the versions and hardware a run ran with.

torch is imported only by the functions that describe a torch run (`versions` without
`frameworks`, `hardware` on CUDA): the TensorFlow implementation, which never imports
torch, records its own framework through the same functions.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import mlbench_worker
from mlbench_worker.shared.host_cpu import cpu_model

if TYPE_CHECKING:
    import torch


def versions(frameworks: dict[str, str] | None = None) -> dict:
    """Python, MPI and mlbench versions, and the framework's: `frameworks` (name ->
    version, e.g. TensorFlow's and Keras's), or torch's when not given."""
    import mpi4py
    from mpi4py import MPI

    if frameworks is None:
        import torch

        frameworks = {"torch": torch.__version__}
    library = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
    return {
        "python": platform.python_version(),
        **frameworks,
        "mpi": f"{library} (mpi4py {mpi4py.__version__})",
        "mlbench": mlbench_worker.__version__,
    }


def hardware(device: torch.device, threads: int, hostnames: list[str]) -> dict:
    """The machine a torch run ran on (`host_hardware`), with its GPU when on CUDA."""
    info = host_hardware(threads, hostnames)
    if device.type == "cuda":
        import torch

        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def host_hardware(threads: int, hostnames: list[str]) -> dict:
    """The machines' CPU, memory and names, whatever the framework (no GPU: that is the
    framework's to say)."""
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads_per_rank": threads,
        "memory_gib": memory_gib(),
        "hosts": sorted(set(hostnames)),
        "platform": platform.platform(),
    }


def default_threads() -> int:
    """Cores this rank may use: its CPU binding, or this machine's cores shared by its ranks.

    A framework would otherwise start one thread per core in every rank, and ranks on one
    machine would fight over the same cores (or, bound to one core, run several threads on
    it).
    """
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    allowed = allowed or 1
    if allowed < (os.cpu_count() or 1):  # mpirun bound this rank: use what it was given
        return allowed
    local_ranks = int(
        os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("MPI_LOCALNRANKS") or 1
    )
    return max(1, allowed // max(1, local_ranks))


def memory_gib() -> float | None:
    """Total memory in GiB (None where /proc is absent)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def hostname() -> str:
    return socket.gethostname()
