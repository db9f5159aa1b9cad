"""The evaluator's own test inputs for the ONNX audit are the training pipeline's: regenerated
from the seed for the generated sets (tasks/<family>/synthetic.py), read from checksummed
official files for the real ones; any subset of rows, in the order asked. Task 1b's, which
the evaluator decodes and crops itself: test_imagenet_inputs.py."""

from __future__ import annotations

import bz2

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from mlbench_worker.shared.evaluation import file_inputs, test_sets
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.tasks.cifar10 import reader as cifar_reader
from mlbench_worker.tasks.cifar10 import synthetic as cifar_synthetic
from mlbench_worker.tasks.epsilon import synthetic as epsilon_synthetic
from tests.evaluation.test_file_labels import write_epsilon_test
from tests.worker.helpers import file_md5s, make_cifar_folder


@pytest.mark.parametrize(("seed", "size"), [(42, 4_321), (7, 2_000)])
def test_task_1a_generated_images_are_the_pipelines(seed, size):
    pipeline = cifar_synthetic.generate(seed, train_size=1, test_size=size).test_x
    everything = test_sets.inputs(
        TestSet("resnet20-cifar10", "synthetic", seed, size), np.arange(size)
    )
    assert everything.dtype == np.uint8 and everything.shape == (size, 3, 32, 32)
    np.testing.assert_array_equal(everything, pipeline)
    rows = np.array([size - 1, 3, 2_500 % size, 0])  # any order, across chunks
    some = test_sets.inputs(TestSet("resnet20-cifar10", "synthetic", seed, size), rows)
    np.testing.assert_array_equal(some, pipeline[rows])


@pytest.mark.parametrize(("seed", "size", "features"), [(42, 9_000, 2000), (3, 700, 50)])
def test_task_2_generated_rows_are_the_pipelines(seed, size, features):
    rows = np.array([size - 1, 0, 8_191 % size, 8_192 % size, 17])
    pipeline, _ = epsilon_synthetic.rows(seed, "test", size, np.sort(rows), features)
    ours = test_sets.inputs(
        TestSet("logreg-epsilon", "synthetic", seed, size, features=features), rows
    )
    assert ours.dtype == np.float32 and ours.shape == (rows.size, features)
    order = np.argsort(np.argsort(rows))  # the pipeline gave them sorted
    np.testing.assert_allclose(ours, pipeline[order], rtol=0, atol=1e-6)


def test_cifar10_images_from_the_checksummed_test_batch(tmp_path):
    folder = make_cifar_folder(tmp_path, per_batch=30)
    md5 = file_md5s(folder)
    rows = np.array([29, 0, 7])
    ours = file_inputs.cifar10(tmp_path, rows, md5=md5)
    theirs = cifar_reader.parse_folder(folder, md5).test_x
    np.testing.assert_array_equal(ours, theirs[rows])
    with pytest.raises(LabelsUnavailable, match="wrong checksum"):
        file_inputs.cifar10(tmp_path, rows)  # the official MD5: these are not the files
    with pytest.raises(LabelsUnavailable, match="has 30 images, not 31"):
        file_inputs.cifar10(tmp_path, np.array([30]), md5=md5)


def test_epsilon_rows_from_the_checksummed_compressed_file(tmp_path):
    labels = ["+1", "-1", "-1", "1", "-1"]
    sha = {"epsilon_normalized.t.bz2": write_epsilon_test(tmp_path, labels, features=6)}
    rows = np.array([4, 1, 2])
    ours = file_inputs.epsilon(tmp_path, rows, sha256=sha, width=6)
    plain = tmp_path / "plain.txt"
    plain.write_bytes(bz2.decompress((tmp_path / "epsilon_normalized.t.bz2").read_bytes()))
    x, _ = load_svmlight_file(str(plain), n_features=6, zero_based=False)
    np.testing.assert_allclose(ours, x.toarray()[rows].astype(np.float32), rtol=0, atol=0)
    with pytest.raises(LabelsUnavailable, match="ends before row 6"):
        file_inputs.epsilon(tmp_path, np.array([5]), sha256=sha, width=6)
    with pytest.raises(LabelsUnavailable, match="feature outside 1..5"):
        file_inputs.epsilon(tmp_path, rows, sha256=sha, width=5)
