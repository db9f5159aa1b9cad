"""ResNets for 32x32 images, as in He et al. 2016 (section 4.2) and its pre-activation follow-up.

Depth 6n+2: a 3x3 stem with 16 filters, three stages of n basic blocks (16, 32, 64 filters,
the last two halving the resolution), global average pooling and one linear layer. The
shortcut that changes shape is "option A" of the paper: take every second pixel and pad the
new channels with zeros, so shortcuts add no parameters (ResNet-20: 269,722 parameters).
The pre-activation variant (He et al., "Identity Mappings in Deep Residual Networks") moves
batch norm and ReLU in front of each convolution and adds one final BN-ReLU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def he_init(model: nn.Module) -> None:
    """He (Kaiming) normal initialisation of the convolutions, as He et al. 2016 do, and
    batch norm as identity (every ResNet here, CIFAR and ImageNet)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ShortcutA(nn.Module):
    """Parameter-free shortcut: subsample by the stride, zero-pad the extra channels."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad = cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            half = self.pad // 2
            x = F.pad(x, (0, 0, 0, 0, half, self.pad - half))
        return x


class BasicBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU (the original ordering)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = _conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = ShortcutA(cin, cout, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + (x if self.shortcut is None else self.shortcut(x))
        return F.relu(out)


class PreActBlock(nn.Module):
    """BN-ReLU-conv-BN-ReLU-conv, plus the shortcut, with nothing after the addition."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = _conv3x3(cout, cout)
        self.shortcut = ShortcutA(cin, cout, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + (x if self.shortcut is None else self.shortcut(x))


class CifarResNet(nn.Module):
    """Stem, three stages of `n` blocks, pooling, classifier; `preact` picks the block kind."""

    def __init__(self, depth: int, num_classes: int = 10, preact: bool = False) -> None:
        super().__init__()
        if (depth - 2) % 6 != 0 or depth < 8:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, ...), got {depth}")
        n = (depth - 2) // 6
        block = PreActBlock if preact else BasicBlock
        self.preact = preact
        self.conv1 = _conv3x3(3, 16)
        # The original network normalises the stem's output; the pre-activation one leaves
        # that to the first block and normalises once more before pooling instead.
        self.bn1 = nn.BatchNorm2d(16) if not preact else None
        layers: list[nn.Module] = []
        cin = 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(block(cin, width, stride))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.bn_final = nn.BatchNorm2d(64) if preact else None
        self.fc = nn.Linear(64, num_classes)
        he_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        if self.bn1 is not None:
            out = F.relu(self.bn1(out))
        out = self.layers(out)
        if self.bn_final is not None:
            out = F.relu(self.bn_final(out))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def resnet(depth: int, num_classes: int = 10) -> CifarResNet:
    """The original ResNet of depth `depth` (20, 32, 44, 56)."""
    return CifarResNet(depth, num_classes, preact=False)


def preact_resnet(depth: int, num_classes: int = 10) -> CifarResNet:
    """The pre-activation ResNet of depth `depth`."""
    return CifarResNet(depth, num_classes, preact=True)
