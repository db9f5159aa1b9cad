"""A generated, learnable stand-in for CIFAR-10 when the real files cannot be had.

Each class owns a smooth random colour pattern (an 8x8x3 field, upsampled to 32x32). An
image is its class pattern at a random strength, plus a weaker pattern of a random other
class, a random brightness shift and per-pixel noise, stored as uint8 like CIFAR-10. A
ResNet must learn the patterns to separate the classes (chance is 10%). It is a functional
stand-in, not a hard problem: on a few thousand images a ResNet-20 is far above chance
within two short epochs, and one full epoch of 50,000 images takes it to about 99%.

Everything derives from the seed, in fixed chunks, so every rank builds the same arrays and
a smaller set is a prefix of the larger one. Results on it are labelled "synthetic" and must
never be compared with CIFAR-10 results.
"""

from __future__ import annotations

import numpy as np

from mlbench_worker.shared import test_sizes
from mlbench_worker.tasks.cifar10.reader import Arrays

CLASSES = [f"pattern{i}" for i in range(10)]
TRAIN_SIZE = 50_000
TEST_SIZE = test_sizes.whole("cifar10", test_sizes.SYNTHETIC)
_CHUNK = 2_000


def _templates(rng: np.random.Generator) -> np.ndarray:
    coarse = rng.normal(0.0, 1.0, size=(10, 3, 8, 8)).astype(np.float32)
    fine = coarse.repeat(4, axis=2).repeat(4, axis=3)
    # Blur the 4x4 blocks a little so the patterns are smooth, not blocky.
    fine = (fine + np.roll(fine, 2, axis=2) + np.roll(fine, 2, axis=3)) / 3.0
    return fine / fine.std(axis=(1, 2, 3), keepdims=True)


def _images(
    templates: np.ndarray, count: int, seed: int, stream: int
) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for start in range(0, count, _CHUNK):
        n = _CHUNK  # always whole chunks, cut at the end: smaller sets are prefixes
        rng = np.random.default_rng([seed, stream, start])
        y = rng.integers(0, 10, size=n)
        other = (y + rng.integers(1, 10, size=n)) % 10
        strength = rng.uniform(20.0, 45.0, size=(n, 1, 1, 1)).astype(np.float32)
        # Uniform noise (std ~40) from bytes: several times faster than Gaussian draws.
        x = rng.integers(-70, 70, size=(n, 3, 32, 32), dtype=np.int8).astype(np.float32)
        x += strength * templates[y]
        x += (0.6 * strength) * templates[other]
        x += rng.normal(128.0, 20.0, size=(n, 1, 1, 1)).astype(np.float32)
        np.clip(x, 0, 255, out=x)
        xs.append(x.astype(np.uint8))
        ys.append(y.astype(np.int64))
    return np.concatenate(xs)[:count], np.concatenate(ys)[:count]


def generate(seed: int, train_size: int = TRAIN_SIZE, test_size: int = TEST_SIZE) -> Arrays:
    """The synthetic set for `seed`: CIFAR-shaped uint8 images, a separate held-out test split."""
    templates = _templates(np.random.default_rng([seed, 0]))
    train_x, train_y = _images(templates, train_size, seed, 1)
    test_x, test_y = _images(templates, test_size, seed, 2)
    return Arrays(train_x, train_y, test_x, test_y, list(CLASSES))
