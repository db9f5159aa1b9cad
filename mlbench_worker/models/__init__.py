"""Model registry: names are known without importing torch (the option parser needs them)."""

from __future__ import annotations

from typing import Any

# name -> (builder in resnet_cifar, depth)
MODELS: dict[str, tuple[str, int]] = {
    "resnet20": ("resnet", 20),
    "resnet32": ("resnet", 32),
    "resnet44": ("resnet", 44),
    "resnet56": ("resnet", 56),
    "preact-resnet20": ("preact_resnet", 20),
    "preact-resnet32": ("preact_resnet", 32),
    "preact-resnet44": ("preact_resnet", 44),
    "preact-resnet56": ("preact_resnet", 56),
}


def build_model(name: str, num_classes: int = 10) -> Any:
    """A freshly initialised model called `name` (one of MODELS)."""
    from mlbench_worker.models import resnet_cifar

    builder, depth = MODELS[name]
    return getattr(resnet_cifar, builder)(depth, num_classes=num_classes)
