"""Sharding, augmentation and batching, done with whole-batch tensor operations.

The data set lives in memory as one uint8 tensor (N x 3 x 32 x 32). Every epoch all ranks
draw the same permutation (seeded by the shared seed and the epoch number) and rank r takes
every K-th index starting at r: the shards are disjoint, together they cover the data set
(minus fewer than K images, which change every epoch), and every rank has the same number
of steps, which synchronous SGD needs. A batch is gathered with one indexing operation;
random crop (zero padding 4) and horizontal flip are one gather with per-image offsets;
normalisation is one fused multiply-add in float32. No per-image Python code runs.

On an accelerator the uint8 set is copied to the device once (CIFAR-10's 50,000 images are
150 MB) and gathered, cropped and flipped there: a step then sends a few hundred bytes of
indices and offsets instead of the batch, and the host never does per-batch image work that
the device would wait for. The offsets and flips are drawn on the host with the same
generator in both cases, so a seed gives the same images on every device.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

# Defined torch-free in images.py (the TensorFlow implementation shares them); still
# importable from here.
from mlbench_worker.data.images import (  # noqa: F401
    CIFAR10_MEAN,
    CIFAR10_STD,
    PAD,
    channel_stats,
    shard_indices,
)


class Normalize:
    """uint8 images (N x 3 x H x W, on the device or not) -> float32 (x/255 - mean) / std on
    `device`, in one fused multiply-add, laid out channels_last when the model is."""

    def __init__(
        self,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device,
        channels_last: bool = False,
    ) -> None:
        std_t = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.scale = (1.0 / (255.0 * std_t)).to(device)
        self.shift = (-mean_t / std_t).to(device)
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(
            x.shape, dtype=torch.float32, device=self.device, memory_format=self.memory_format
        )
        out.copy_(x)
        return out.mul_(self.scale).add_(self.shift)


class Batches:
    """Yields (images, labels) batches for one rank; `augment` for training, not for eval."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        mean: tuple[float, ...] = CIFAR10_MEAN,
        std: tuple[float, ...] = CIFAR10_STD,
        device: torch.device | str = "cpu",
        channels_last: bool = False,
        augment: bool = True,
    ) -> None:
        self.device = torch.device(device)
        # Where the uint8 set lives (see the module's docstring): the device itself.
        self.images = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)
        self.labels = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64)).to(self.device)
        self.batch_size = batch_size
        self.channels_last = channels_last
        self.augment = augment
        self.normalize = Normalize(mean, std, self.device, channels_last)
        self._arange = torch.arange(32, device=self.device)

    def __len__(self) -> int:
        return len(self.images)

    def steps(self, count: int) -> int:
        """Number of batches for `count` indices (the last one may be smaller)."""
        return -(-count // self.batch_size)

    def iterate(self, indices: np.ndarray, generator: torch.Generator | None = None) -> Iterator:
        """Batches over `indices` in their order; `generator` drives the augmentation."""
        idx = torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))
        for start in range(0, len(idx), self.batch_size):
            yield self.batch(idx[start : start + self.batch_size], generator)

    def batch(
        self, idx: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        idx = idx.to(self.device)
        x = self.images.index_select(0, idx)
        y = self.labels.index_select(0, idx)
        if self.augment:
            x = self._crop_flip(x, generator)
        return self.normalize(x), y

    def _crop_flip(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Random 32x32 crop of the zero-padded 40x40 image, mirrored with probability 1/2."""
        b = x.shape[0]
        side = 32 + 2 * PAD
        padded = torch.zeros((b, 3, side, side), dtype=x.dtype, device=x.device)
        padded[:, :, PAD : PAD + 32, PAD : PAD + 32] = x
        # Drawn on the host whatever the device: the same seed, the same crops everywhere.
        offsets = torch.randint(0, 2 * PAD + 1, (2, b), generator=generator).to(x.device)
        flip = (torch.rand(b, generator=generator) < 0.5).to(x.device)
        ar = self._arange
        rows = (offsets[0, :, None] + ar) * side  # b x 32, row starts in the flat image
        cols = offsets[1, :, None] + torch.where(flip[:, None], ar.flip(0), ar)
        flat_index = (rows[:, :, None] + cols[:, None, :]).view(b, 1, 32 * 32)
        out = torch.gather(padded.view(b, 3, side * side), 2, flat_index.expand(b, 3, 32 * 32))
        return out.view(b, 3, 32, 32)
