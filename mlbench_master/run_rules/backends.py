"""Which communication backends a run may ask for, with and without GPUs, and which one it
gets when its request leaves `backend` out.

Why a module of its own: the API applies these rules (`resolve`, `implementations`) and the
dashboard's form offers exactly what they allow, reading them as data from GET
/api/runs/defaults/ (`served`: `backends`, and each implementation's `backend_choices` and
`default_backend`), so the browser keeps no list of its own. Stated here once, they cannot
drift apart; tests/rules/form_cases.json holds the form and the API to the same cases.

The rules: Run.BACKENDS are the PyTorch side's process groups (mpi through mpi4py, gloo and
nccl through torch.distributed); the GPU_ONLY ones need GPUs, so a run without GPUs may not
ask for them and a measurement without GPUs does not measure them. An implementation runs
on the catalogue's `backends` only (empty: every one) or, on another framework than
PyTorch, on none: it all-reduces with that framework's own collective ops.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.api.models import Run
from mlbench_worker.shared.implementation_catalogue import Implementation

GPU_ONLY = ("nccl",)


def on_device(gpu: bool) -> list[str]:
    """Every backend a run may use with (`gpu`) or without GPUs, in Run.BACKENDS' order."""
    return [b for b in Run.BACKENDS if gpu or b not in GPU_ONLY]


def takes_backend(impl: Implementation) -> bool:
    """Whether a run of `impl` exchanges through one of Run.BACKENDS (PyTorch's side)."""
    return impl.framework == "pytorch"


def choices(impl: Implementation, gpu: bool) -> list[str]:
    """The backends a run of `impl` may ask for; [] when it takes none."""
    if not takes_backend(impl):
        return []
    return [b for b in on_device(gpu) if not impl.backends or b in impl.backends]


def chosen_backend(impl: Implementation, gpu: bool, default: str) -> str:
    """What a run of `impl` gets for a backend left out: `default` where it runs on it, else
    its own GPU backend with GPUs, else its first other one (torch-ddp: nccl or gloo). An
    implementation that takes none keeps `default` (its ranks still start through MPI)."""
    if not takes_backend(impl) or not impl.backends or default in impl.backends:
        return default
    own = [b for b in impl.backends if (b in GPU_ONLY) == gpu]
    return (own or list(impl.backends))[0]


def served_for(impl: Implementation, default: str) -> dict[str, Any]:
    """`impl`'s backends as GET /api/runs/defaults/ serves them, per device."""
    devices = {"cpu": False, "gpu": True}
    return {
        "backend_choices": {name: choices(impl, gpu) for name, gpu in devices.items()},
        "default_backend": {
            name: chosen_backend(impl, gpu, default) for name, gpu in devices.items()
        },
    }
