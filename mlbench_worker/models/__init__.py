"""Model registry: names are known without importing torch (the option parser needs them).

Three families, because a task's data decides which models fit it: `MODELS` are the
ResNets for 32x32 CIFAR images (resnet_cifar.py, task 1a), `IMAGENET_MODELS` the ResNets
for 224x224 ImageNet images (resnet_imagenet.py, task 1b), `LM_MODELS` the language models of
task 3 (awd_lstm.py, gpt.py), each at its task's size and at a tiny size with the same
structure for smoke tests (minutes of CPU instead of hours). A task lists the family it
offers (mlbench_worker/tasks/).
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class LanguageModelSpec:
    """The sizes of one language model; the vocabulary comes from the data."""

    kind: str  # "lstm" (awd_lstm.py) or "gpt" (gpt.py)
    embedding: int  # LSTM: embedding size (= the last layer's); GPT: the width
    hidden: int  # LSTM: hidden units of the inner layers; GPT: unused (4 x width MLP)
    layers: int
    heads: int = 0  # GPT only
    block: int = 0  # GPT only: the context length


LM_MODELS: dict[str, LanguageModelSpec] = {
    "awd-lstm": LanguageModelSpec("lstm", 400, 1150, 3),
    "awd-lstm-tiny": LanguageModelSpec("lstm", 32, 64, 3),
    "gpt-small": LanguageModelSpec("gpt", 256, 0, 4, heads=4, block=128),
    "gpt-tiny": LanguageModelSpec("gpt", 32, 0, 2, heads=2, block=32),
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


def build_language_model(name: str, vocab: int) -> Any:
    """A freshly initialised language model called `name` (one of LM_MODELS) for `vocab`
    words."""
    spec = LM_MODELS[name]
    if spec.kind == "lstm":
        from mlbench_worker.models.awd_lstm import AWDLSTM

        return AWDLSTM(vocab, spec.embedding, spec.hidden, spec.layers)
    from mlbench_worker.models.gpt import GPT

    return GPT(vocab, spec.embedding, spec.layers, spec.heads, spec.block)
