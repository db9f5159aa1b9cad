"""ResNets for 224x224 ImageNet images: He et al. 2016 (section 3.4, table 1), version 1.5.

Written here because torchvision, where these usually come from, cannot be imported with
the CPU build of torch that these machines install. The layers, their order, their
initialisation and the parameter counts are torchvision's (ResNet-50: 25,557,032):

- stem: 7x7 convolution with 64 filters and stride 2, batch norm, ReLU, 3x3 max-pool with
  stride 2;
- four stages of 64, 128, 256 and 512 filters; the first block of stages 2 to 4 halves
  the resolution. Depths 18/34 use basic blocks (two 3x3 convolutions), depths 50/101
  bottlenecks (1x1, 3x3, 1x1 with 4x the filters out);
- "v1.5" (MLPerf's ResNet-50): a bottleneck that halves the resolution does so with
  stride 2 on its 3x3 convolution, not on the first 1x1 as the paper's v1 does. It costs a
  little speed and gains about half a point of top-1 accuracy;
- a shortcut that changes the shape is a strided 1x1 convolution with batch norm (the
  paper's option B);
- global average pooling and a linear layer with 1,000 outputs;
- He's normal initialisation (fan-out) for convolutions, batch-norm scales 1 and shifts 0,
  the linear layer as torch initialises it.

`zero_init_residual` starts the scale of each block's last batch norm at zero (Goyal et al.
2017, section 5.1), so every block begins as the identity: it makes the first steps of
large-batch training more stable.
"""

from __future__ import annotations

import torch
from torch import nn

from mlbench_worker.models.resnet_cifar import he_init

# depth -> (block kind, blocks per stage)
LAYOUTS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
}
WIDTHS = (64, 128, 256, 512)


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(cout)
    )


class BasicBlock(nn.Module):
    """3x3 conv-BN-ReLU, 3x3 conv-BN, plus the shortcut, then ReLU."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.shortcut = _shortcut(cin, width, stride)
        self.relu = nn.ReLU(inplace=True)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.shortcut is None else self.shortcut(x)
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 conv-BN-ReLU, 3x3 conv (stride here: v1.5)-BN-ReLU, 1x1 conv-BN, shortcut, ReLU."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = _shortcut(cin, cout, stride)
        self.relu = nn.ReLU(inplace=True)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x if self.shortcut is None else self.shortcut(x)
        return self.relu(out)


class ResNet(nn.Module):
    """An ImageNet ResNet of one of the depths in LAYOUTS (see the module docstring)."""

    def __init__(
        self, depth: int, num_classes: int = 1000, zero_init_residual: bool = False
    ) -> None:
        super().__init__()
        if depth not in LAYOUTS:
            raise ValueError(
                f"ImageNet ResNet depth must be one of {', '.join(map(str, LAYOUTS))}, got {depth}"
            )
        kind, counts = LAYOUTS[depth]
        block = BasicBlock if kind == "basic" else Bottleneck
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        cin = 64
        for i, (width, count) in enumerate(zip(WIDTHS, counts, strict=True)):
            blocks = []
            for j in range(count):
                blocks.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        he_init(self)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock | Bottleneck):
                    nn.init.zeros_(m.last_bn.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet(depth: int, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-`depth` (18, 34, 50 or 101) for ImageNet, freshly initialised."""
    return ResNet(depth, num_classes=num_classes, zero_init_residual=zero_init_residual)
