"""The ImageNet ResNets: torchvision's exact sizes, v1.5 strides, zero-initialised residuals."""

import pytest
import torch

from mlbench_worker.models import IMAGENET_MODELS, MODELS, build_imagenet_model
from mlbench_worker.models.resnet_imagenet import Bottleneck, resnet
from mlbench_worker.tasks import TASKS

# torchvision's counts for the same architectures (resnet18 ... resnet101, 1000 classes).
EXPECTED = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
}


@pytest.mark.parametrize("name,count", sorted(EXPECTED.items()))
def test_parameter_counts(name, count):
    model = build_imagenet_model(name)
    assert sum(p.numel() for p in model.parameters()) == count


def test_every_depth_classifies_a_batch_into_1000_classes():
    x = torch.randn(2, 3, 64, 64)
    for name in IMAGENET_MODELS:
        assert build_imagenet_model(name)(x).shape == (2, 1000), name


def test_v15_puts_the_stride_on_the_3x3_convolution():
    model = resnet(50)
    first = model.stages[1][0]
    assert isinstance(first, Bottleneck)
    assert first.conv1.stride == (1, 1) and first.conv1.kernel_size == (1, 1)
    assert first.conv2.stride == (2, 2) and first.conv2.kernel_size == (3, 3)
    assert first.shortcut[0].stride == (2, 2)
    # 224 -> 112 (stem conv) -> 56 (pool) -> 56, 28, 14, 7 through the stages
    sizes = []
    x = model.stem(torch.randn(1, 3, 224, 224))
    for stage in model.stages:
        x = stage(x)
        sizes.append(x.shape[-1])
    assert sizes == [56, 28, 14, 7] and x.shape[1] == 2048


def test_zero_init_residual_zeroes_only_each_blocks_last_bn_scale():
    plain, zeroed = resnet(18), resnet(18, zero_init_residual=True)
    last = [b.bn2.weight for stage in zeroed.stages for b in stage]
    assert len(last) == 8 and all(float(w.detach().abs().sum()) == 0 for w in last)
    assert all(float(b.bn1.weight.detach().min()) == 1 for stage in zeroed.stages for b in stage)
    assert all(float(b.bn2.weight.detach().min()) == 1 for stage in plain.stages for b in stage)
    # With every residual branch silent, a block is the identity followed by ReLU.
    block = zeroed.stages[0][0].eval()
    x = torch.randn(1, 64, 8, 8).relu()
    assert torch.allclose(block(x), x)


def test_unknown_depth_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="18, 34, 50, 101"):
        resnet(152)


def test_each_task_offers_the_models_that_fit_its_data():
    assert TASKS["resnet50-imagenet"].models == tuple(IMAGENET_MODELS)
    assert TASKS["resnet20-cifar10"].models == tuple(MODELS)
    assert "resnet50" not in MODELS and "resnet20" not in IMAGENET_MODELS
