"""The CIFAR ResNets have the sizes of He et al. 2016 and the right shapes."""

import pytest
import torch

from mlbench_worker.models import MODELS, build_model

# Option A (parameter-free) shortcuts, as the paper uses on CIFAR-10: 0.27M/0.46M/0.66M/0.85M.
# (272,474 for ResNet-20 is the count with 1x1-projection shortcuts, "option B": +2,752.)
EXPECTED = {
    "resnet20": 269_722,
    "resnet32": 464_154,
    "resnet44": 658_586,
    "resnet56": 853_018,
    "preact-resnet20": 269_722,
    "preact-resnet56": 853_018,
}


@pytest.mark.parametrize("name,count", sorted(EXPECTED.items()))
def test_parameter_counts(name, count):
    model = build_model(name)
    assert sum(p.numel() for p in model.parameters()) == count


def test_every_registered_model_classifies_cifar_shaped_input():
    x = torch.randn(2, 3, 32, 32)
    for name in MODELS:
        assert build_model(name)(x).shape == (2, 10), name


def test_depth_must_be_6n_plus_2():
    from mlbench_worker.models.resnet_cifar import resnet

    with pytest.raises(ValueError, match="6n\\+2"):
        resnet(21)
