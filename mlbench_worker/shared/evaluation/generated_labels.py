"""The labels of the generated (synthetic) test sets, regenerated from the run's seed.

The evaluator does not ask the training code for labels: it draws them itself, with numpy,
from the same seeded streams the generators document (tasks/<family>/synthetic.py). Only
the label draws are repeated, never the images or features, so regenerating a test set's
labels costs milliseconds. The generators and these functions are two readings of one
recipe; tests/evaluation/test_generated_labels.py holds them to the same labels, so a
change to a generator that is not made here too fails there, not in a run's grade.

- task 1a (CIFAR-10-shaped): chunks of 2,000 images; chunk starting at image s of the test
  split (stream 2) draws from ``default_rng([seed, 2, s])`` and its first draw is the
  chunk's labels, ``integers(0, 10, 2000)``; the set is the first N of the chunks.
- task 2 (epsilon-shaped): the direction v is the second draw of ``default_rng([seed, 0])``
  (after a features x 32 normal matrix); chunk c of the test split (stream 2) draws 8,192 x
  32 float32 normals u, then 8,192 uniforms, below 0.08 for a flipped label; the label is
  +1 where u . v >= 0 (computed over the first N rows, float32, as the generator does),
  else -1, times -1 where flipped.
- task 1b (ImageNet-shaped): image i of the validation split is of class i mod 1000.
"""

from __future__ import annotations

import numpy as np

TEST_STREAM = 2  # the stream of every generated test split (1 is training)

CIFAR_CHUNK, CIFAR_CLASSES = 2_000, 10

EPSILON_CHUNK, EPSILON_LATENT, EPSILON_FLIP = 8192, 32, 0.08

IMAGENET_CLASSES = 1000


def cifar10(seed: int, count: int) -> np.ndarray:
    """Labels (int64, 0..9) of the first `count` images of the generated CIFAR-10 test set."""
    parts = [
        np.random.default_rng([seed, TEST_STREAM, start]).integers(0, CIFAR_CLASSES, CIFAR_CHUNK)
        for start in range(0, count, CIFAR_CHUNK)
    ]
    return np.concatenate(parts)[:count].astype(np.int64) if parts else np.zeros(0, np.int64)


def epsilon(seed: int, count: int, features: int) -> np.ndarray:
    """Labels (int64, -1/+1) of the first `count` rows of the generated epsilon test set
    with `features` features (the direction of the labels depends on it)."""
    plan = np.random.default_rng([seed, 0])
    plan.standard_normal((features, EPSILON_LATENT))  # the mixing matrix's draw: skipped
    direction = plan.standard_normal(EPSILON_LATENT).astype(np.float32)
    us, flips = [], []
    for chunk in range(-(-count // EPSILON_CHUNK)):
        rng = np.random.default_rng([seed, TEST_STREAM, chunk])
        us.append(rng.standard_normal((EPSILON_CHUNK, EPSILON_LATENT), dtype=np.float32))
        flips.append(rng.random(EPSILON_CHUNK) < EPSILON_FLIP)
    if not us:
        return np.zeros(0, np.int64)
    u, flip = np.concatenate(us)[:count], np.concatenate(flips)[:count]
    labels = np.where((u @ direction) >= 0, 1, -1).astype(np.int64)
    labels[flip] *= -1
    return labels


def imagenet(count: int) -> np.ndarray:
    """Labels (int64, 0..999) of the first `count` images of the generated validation set."""
    return np.arange(count, dtype=np.int64) % IMAGENET_CLASSES
