"""The evaluator regenerates a generated test set's labels, with numpy alone, exactly as the
training data pipeline builds them (tasks/<family>/synthetic.py): for several seeds and for
sizes that end inside a chunk of the generators' random streams."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench_worker.shared.evaluation import test_sets
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.tasks.cifar10 import synthetic as cifar_synthetic
from mlbench_worker.tasks.epsilon import synthetic as epsilon_synthetic
from mlbench_worker.tasks.epsilon.task import FEATURES
from mlbench_worker.tasks.imagenet import synthetic as imagenet_synthetic


@pytest.mark.parametrize(("seed", "size"), [(42, cifar_synthetic.TEST_SIZE), (7, 4_321)])
def test_task_1a_labels_are_the_pipelines(seed, size):
    pipeline = cifar_synthetic.generate(seed, train_size=1, test_size=size).test_y
    ours = test_sets.labels(TestSet("resnet20-cifar10", "synthetic", seed, size))
    assert ours.dtype == np.int64 and ours.shape == (size,)
    np.testing.assert_array_equal(ours, pipeline)


@pytest.mark.parametrize(("seed", "size", "features"), [(42, 20_000, FEATURES), (3, 9_000, 50)])
def test_task_2_labels_are_the_pipelines(seed, size, features):
    # The pipeline computes features for the rows it is asked for: ask in two halves to
    # keep its memory small; the labels do not depend on which rows are asked.
    halves = np.array_split(np.arange(size), 2)
    pipeline = np.concatenate(
        [epsilon_synthetic.rows(seed, "test", size, part, features)[1] for part in halves]
    )
    ours = test_sets.labels(TestSet("logreg-epsilon", "synthetic", seed, size, features=features))
    assert set(np.unique(ours)) == {-1, 1}
    np.testing.assert_array_equal(ours, pipeline.astype(np.int64))


def test_task_1b_labels_are_the_pipelines(tmp_path):
    size = imagenet_synthetic.VAL_SIZE + 17
    pipeline = imagenet_synthetic.split(tmp_path, "val", size).labels  # names only, no files
    ours = test_sets.labels(TestSet("resnet50-imagenet", "synthetic", 42, size))
    np.testing.assert_array_equal(ours, pipeline)


def test_a_smaller_set_is_a_prefix_and_another_seed_another_set():
    small = test_sets.labels(TestSet("resnet20-cifar10", "synthetic", 42, 2_500))
    large = test_sets.labels(TestSet("resnet20-cifar10", "synthetic", 42, 10_000))
    other = test_sets.labels(TestSet("resnet20-cifar10", "synthetic", 43, 2_500))
    np.testing.assert_array_equal(small, large[:2_500])
    assert (small != other).mean() > 0.8  # two seeds agree about as often as chance (10 %)
