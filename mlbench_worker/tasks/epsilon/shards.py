"""Which training and test rows each of K workers holds, and in which order it visits them:
task 2's partitioning rule (data.py says why it is so), stated once for every implementation.

Plain numpy, no torch: the reference loop (data.py) and the Spark implementation's executors
(implementations/spark/) both read it, so a Spark partition holds exactly the rows of the
reference rank of the same number, in the same order each epoch.
"""

from __future__ import annotations

import numpy as np

PARTITION_STREAM = 0x5EED  # keeps the partition's random stream apart from the epochs'


def partition(n: int, rank: int, world: int, seed: int) -> np.ndarray:
    """The training rows rank `rank` holds for the whole run, sorted (disjoint, equal sizes)."""
    perm = np.random.default_rng([seed, PARTITION_STREAM]).permutation(n)
    usable = n - n % world
    return np.sort(perm[rank:usable:world])


def epoch_order(count: int, seed: int, epoch: int, rank: int) -> np.ndarray:
    """The order in which a rank visits its `count` rows in `epoch` (new every epoch)."""
    return np.random.default_rng([seed, epoch, rank]).permutation(count)


def test_indices(n: int, rank: int, world: int) -> np.ndarray:
    """The test rows rank `rank` evaluates: every K-th, unshuffled."""
    return np.arange(rank, n, world)
