"""Model registry: names are known without importing torch (the option parser needs them).

Two families, because a task's data decides which models fit it: `MODELS` are the
ResNets for 32x32 CIFAR images (resnet_cifar.py, task 1a), `IMAGENET_MODELS` the ResNets
for 224x224 ImageNet images (resnet_imagenet.py, task 1b). A task lists the family it
offers (mlbench_worker/tasks/).
"""

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

# name -> depth in resnet_imagenet (v1.5 bottlenecks for 50 and 101)
IMAGENET_MODELS: dict[str, int] = {
    "resnet18": 18,
    "resnet34": 34,
    "resnet50": 50,
    "resnet101": 101,
}


def build_model(name: str, num_classes: int = 10) -> Any:
    """A freshly initialised CIFAR model called `name` (one of MODELS)."""
    from mlbench_worker.models import resnet_cifar

    builder, depth = MODELS[name]
    return getattr(resnet_cifar, builder)(depth, num_classes=num_classes)


def build_imagenet_model(
    name: str, num_classes: int = 1000, zero_init_residual: bool = False
) -> Any:
    """A freshly initialised ImageNet model called `name` (one of IMAGENET_MODELS)."""
    from mlbench_worker.models import resnet_imagenet

    return resnet_imagenet.resnet(
        IMAGENET_MODELS[name], num_classes=num_classes, zero_init_residual=zero_init_residual
    )
