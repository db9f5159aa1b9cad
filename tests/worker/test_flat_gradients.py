"""The flat gradient buffer: every .grad is a view into it, whatever the memory format."""

import pytest
import torch
import torch.nn.functional as F

from mlbench_worker.models import build_model
from mlbench_worker.training.comm import FlatGradients


@pytest.mark.parametrize("channels_last", [False, True])
def test_backward_writes_into_one_buffer(channels_last):
    torch.manual_seed(0)
    model = build_model("resnet20")
    reference = build_model("resnet20")
    reference.load_state_dict(model.state_dict())
    if channels_last:  # both: the memory format changes the arithmetic slightly
        model = model.to(memory_format=torch.channels_last)
        reference = reference.to(memory_format=torch.channels_last)
    grads = FlatGradients(list(model.parameters()), extra=4)
    assert grads.numel == 269_722 and grads.buffer.numel() == 269_726
    assert all(p.grad.stride() == p.stride() for p in model.parameters())

    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    for _ in range(2):  # the second step must reuse the same buffer after zero_()
        grads.zero_()
        F.cross_entropy(model(x), y).backward()
        assert grads.intact()
    reference.zero_grad()
    F.cross_entropy(reference(x), y).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.equal(got, expected)
    assert float(grads.grads.abs().sum()) == pytest.approx(float(got.abs().sum()), rel=1e-5)
    assert float(grads.extra.abs().sum()) == 0.0  # the extra slots are not gradients
