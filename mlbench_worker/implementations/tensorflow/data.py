"""The reference loop's batches, made with numpy for TensorFlow: same shards, same order.

A rank visits the indices `shard_indices` gives it (the reference's own function, from
mlbench_worker/data/images.py), in that order, `--batch-size` at a time, the last batch of
an epoch possibly smaller, exactly as the reference's Batches do: so in every epoch rank r
trains on the same images, in the same batches, under either framework (tested). The
augmentation is the same kind: a random 32x32 crop of the image zero-padded by 4 pixels on
every side, mirrored with probability 1/2; then (x/255 - mean) / std with the same channel
statistics. Its random draws come from numpy's generator, seeded by (seed, epoch, rank),
where the reference draws from torch's: the same distribution, not the same draws (torch's
stream cannot be reproduced without torch, which this process never imports).

Why numpy and not tf.data: the per-step data time is measured the way the reference
measures it (from asking for a batch to having it ready), and the code is a few array
operations, as the reference's are a few tensor operations. Images are kept NHWC (Keras's
layout on CPU) from the start, so a batch is one gather and one multiply-add.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mlbench_worker.data.images import PAD


def epoch_generator(seed: int, epoch: int, rank: int) -> np.random.Generator:
    """The augmentation's random draws of `rank` in `epoch` (independent of other ranks')."""
    return np.random.default_rng([seed, epoch, rank, 1])


class ImageBatches:
    """(images, labels) batches of one rank: float32 N x 32 x 32 x 3 and int32 N."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        augment: bool,
    ) -> None:
        # uint8 N x 3 x 32 x 32 as our readers give them -> N x 32 x 32 x 3, once.
        self.images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        self.labels = np.ascontiguousarray(labels, dtype=np.int32)
        self.batch_size = batch_size
        self.augment = augment
        std_a = np.asarray(std, dtype=np.float32)
        self.scale = 1.0 / (255.0 * std_a)
        self.shift = -np.asarray(mean, dtype=np.float32) / std_a
        self._arange = np.arange(32)

    def __len__(self) -> int:
        return len(self.images)

    def steps(self, count: int) -> int:
        """Number of batches for `count` indices (the last one may be smaller)."""
        return -(-count // self.batch_size)

    def iterate(
        self, indices: np.ndarray, generator: np.random.Generator | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches over `indices` in their order; `generator` drives the augmentation."""
        for start in range(0, len(indices), self.batch_size):
            yield self.batch(indices[start : start + self.batch_size], generator)

    def batch(
        self, idx: np.ndarray, generator: np.random.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        x = self.images[idx]
        if self.augment:
            x = self.crop_flip(x, generator or np.random.default_rng())
        out = x.astype(np.float32)
        out *= self.scale
        out += self.shift
        return out, self.labels[idx]

    def crop_flip(self, x: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        """Random 32x32 crop of the zero-padded 40x40 image, mirrored with probability 1/2."""
        b = x.shape[0]
        side = 32 + 2 * PAD
        padded = np.zeros((b, side, side, 3), dtype=x.dtype)
        padded[:, PAD : PAD + 32, PAD : PAD + 32] = x
        offsets = generator.integers(0, 2 * PAD + 1, size=(2, b))
        flip = generator.random(b) < 0.5
        ar = self._arange
        rows = offsets[0, :, None] + ar  # b x 32
        cols = offsets[1, :, None] + np.where(flip[:, None], ar[::-1], ar)
        return padded[np.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
