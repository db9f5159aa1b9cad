"""What every trainer of an image task shares about its data, whatever its framework.

Which indices a rank visits in an epoch (`shard_indices`), how many steps that makes
(`epoch_steps`, known before a trainer and its schedule are built), the zero padding of the random
crop (`PAD`) and the channel statistics that normalise the images. numpy only: the
reference loop's batches (loader.py, torch) and the TensorFlow implementation
(mlbench_worker/implementations/tensorflow/data.py) read the same definitions, so that a rank sees the
same images in the same order whichever framework trains it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Per-channel mean and std of the CIFAR-10 training images (in 0..1 units).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
PAD = 4  # the random crop's zero padding on each side


def shard_indices(n: int, rank: int, world: int, seed: int, epoch: int) -> np.ndarray:
    """The indices rank `rank` trains on in `epoch`: disjoint across ranks, same size for all."""
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    usable = n - n % world
    return perm[rank:usable:world]


def epoch_steps(batches: Any, world: int) -> int:
    """The steps of an epoch over `batches` (their `steps(count)` rule) when each of `world`
    ranks visits its shard_indices: the same on every rank and in every epoch, so a
    schedule in steps can be made before the trainer that counts them."""
    return batches.steps(len(batches) // world)  # len(shard_indices(...)) of every rank


def channel_stats(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std (0..1 units) of a uint8 N x 3 x H x W array."""
    x = images.reshape(images.shape[0], 3, -1)
    mean = tuple(float(x[:, c].mean()) / 255.0 for c in range(3))
    std = tuple(float(x[:, c].std()) / 255.0 for c in range(3))
    return mean, std
