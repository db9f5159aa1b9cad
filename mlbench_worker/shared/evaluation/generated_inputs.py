"""The inputs of the generated (synthetic) test sets, regenerated from the run's seed, for the
ONNX audit (model_audit.py).

The audit runs a run's exported model on test inputs the evaluator owns, as it owns the
labels (generated_labels.py): it draws them itself, with numpy, from the seeded streams the
generators document (tasks/<family>/synthetic.py), and never asks the training code. The
generators and these functions are two readings of one recipe;
tests/evaluation/test_model_audit_inputs.py holds them to the same arrays, so a change to a
generator not made here too fails there, not in a run's audit. Only the chunks holding the
rows asked for are drawn, so a sample of a large set costs a fraction of the whole.

- task 1a (CIFAR-10-shaped): ten class patterns from ``default_rng([seed, 0])`` (10 x 3 x 8 x 8
  normals, each cell repeated 4 x 4, blurred with two rolls by 2, scaled to unit std); the
  test split's chunk starting at image s draws from ``default_rng([seed, 2, s])``: 2,000
  labels, another class per image, a strength in 20..45, int8 noise in -70..69, a
  brightness N(128, 20); image = noise + strength x its pattern + 0.6 strength x the other's
  + brightness, clipped to 0..255, as uint8 (N x 3 x 32 x 32).
- task 2 (epsilon-shaped): a features x 32 normal matrix from ``default_rng([seed, 0])``,
  orthonormalised (QR), transposed; the test split's chunk c draws 8,192 x 32 float32
  normals u from ``default_rng([seed, 2, c])``; a row is (u A) / |u|, float32.
"""

from __future__ import annotations

import numpy as np

from mlbench_worker.shared.evaluation.generated_labels import (
    CIFAR_CHUNK,
    CIFAR_CLASSES,
    EPSILON_CHUNK,
    EPSILON_LATENT,
    TEST_STREAM,
)


def _cifar_patterns(seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 0])
    coarse = rng.normal(0.0, 1.0, size=(CIFAR_CLASSES, 3, 8, 8)).astype(np.float32)
    fine = coarse.repeat(4, axis=2).repeat(4, axis=3)
    fine = (fine + np.roll(fine, 2, axis=2) + np.roll(fine, 2, axis=3)) / 3.0
    return fine / fine.std(axis=(1, 2, 3), keepdims=True)


def _cifar_chunk(patterns: np.ndarray, seed: int, start: int) -> np.ndarray:
    n = CIFAR_CHUNK
    rng = np.random.default_rng([seed, TEST_STREAM, start])
    y = rng.integers(0, CIFAR_CLASSES, size=n)
    other = (y + rng.integers(1, CIFAR_CLASSES, size=n)) % CIFAR_CLASSES
    strength = rng.uniform(20.0, 45.0, size=(n, 1, 1, 1)).astype(np.float32)
    x = rng.integers(-70, 70, size=(n, 3, 32, 32), dtype=np.int8).astype(np.float32)
    x += strength * patterns[y]
    x += (0.6 * strength) * patterns[other]
    x += rng.normal(128.0, 20.0, size=(n, 1, 1, 1)).astype(np.float32)
    np.clip(x, 0, 255, out=x)
    return x.astype(np.uint8)


def cifar10(seed: int, rows: np.ndarray) -> np.ndarray:
    """Images `rows` (positions in the test split, any order) of the generated CIFAR-10 test
    set of `seed`: uint8, len(rows) x 3 x 32 x 32, in the order of `rows`."""
    rows = np.asarray(rows, dtype=np.int64)
    patterns = _cifar_patterns(seed)
    out = np.empty((rows.size, 3, 32, 32), dtype=np.uint8)
    for start in np.unique(rows // CIFAR_CHUNK) * CIFAR_CHUNK:
        inside = np.flatnonzero((rows >= start) & (rows < start + CIFAR_CHUNK))
        out[inside] = _cifar_chunk(patterns, seed, int(start))[rows[inside] - start]
    return out


def epsilon(seed: int, rows: np.ndarray, features: int) -> np.ndarray:
    """Rows `rows` of the generated epsilon test set of `seed` with `features` features:
    float32, len(rows) x features, unit L2 norm, in the order of `rows`."""
    rows = np.asarray(rows, dtype=np.int64)
    plan = np.random.default_rng([seed, 0])
    q, _ = np.linalg.qr(plan.standard_normal((features, EPSILON_LATENT)))
    mixing = np.ascontiguousarray(q.T, dtype=np.float32)
    u = np.empty((rows.size, EPSILON_LATENT), dtype=np.float32)
    for chunk in np.unique(rows // EPSILON_CHUNK):
        inside = np.flatnonzero(rows // EPSILON_CHUNK == chunk)
        rng = np.random.default_rng([seed, TEST_STREAM, int(chunk)])
        drawn = rng.standard_normal((EPSILON_CHUNK, EPSILON_LATENT), dtype=np.float32)
        u[inside] = drawn[rows[inside] - chunk * EPSILON_CHUNK]
    x = u @ mixing
    x /= np.linalg.norm(u, axis=1, keepdims=True)
    return x
