"""The evaluator reads a real test set's labels itself, from checksummed official files in
their real formats (written small here), and agrees with the training reader on them."""

from __future__ import annotations

import bz2
import hashlib

import numpy as np
import pytest

from mlbench_worker.shared.evaluation import file_labels
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.tasks.cifar10 import reader as cifar_reader
from mlbench_worker.tasks.epsilon import reader as epsilon_reader
from tests.worker.helpers import file_md5s, make_archive, make_cifar_folder


def test_cifar10_labels_from_the_folder_are_the_readers(tmp_path):
    folder = make_cifar_folder(tmp_path, per_batch=30)
    md5 = file_md5s(folder)
    ours = file_labels.cifar10(tmp_path, md5=md5)
    theirs = cifar_reader.parse_folder(folder, md5).test_y
    assert ours.shape == (30,)
    np.testing.assert_array_equal(ours, theirs)


def test_cifar10_labels_from_the_archive(tmp_path):
    source = tmp_path / "made"
    folder = make_cifar_folder(source)
    data = tmp_path / "data"
    data.mkdir()
    archive_md5 = make_archive(folder, data / "cifar-10-python.tar.gz")
    md5 = {**file_md5s(folder), "cifar-10-python.tar.gz": archive_md5}
    np.testing.assert_array_equal(
        file_labels.cifar10(data, md5=md5), cifar_reader.parse_folder(folder, None).test_y
    )
    with pytest.raises(LabelsUnavailable, match="cifar-10-python.tar.gz has the wrong checksum"):
        file_labels.cifar10(data, md5={**md5, "cifar-10-python.tar.gz": "0" * 32})
    with pytest.raises(LabelsUnavailable, match="test_batch has MD5 .*, expected 000"):
        file_labels.cifar10(data, md5={**md5, "test_batch": "0" * 32})


def test_cifar10_files_that_are_refused(tmp_path):
    with pytest.raises(LabelsUnavailable, match="neither .*test_batch nor .*tar.gz exists"):
        file_labels.cifar10(tmp_path)
    folder = make_cifar_folder(tmp_path)
    # The real checksums: a file that is not the official one is never read.
    with pytest.raises(LabelsUnavailable, match="test_batch has the wrong checksum .*MD5"):
        file_labels.cifar10(tmp_path)
    (folder / "test_batch").write_bytes(b"not a pickle")
    md5 = file_md5s(folder)
    with pytest.raises(LabelsUnavailable, match="cannot be parsed as a CIFAR-10 batch"):
        file_labels.cifar10(tmp_path, md5=md5)


def write_epsilon_test(folder, labels, features=5):
    """epsilon_normalized.t.bz2 in LIBSVM's text format; returns its SHA-256."""
    rng = np.random.default_rng(0)
    lines = []
    for label in labels:
        values = rng.random(features)
        row = " ".join(f"{i + 1}:{v:.6f}" for i, v in enumerate(values))
        lines.append(f"{label} {row}\n")
    raw = bz2.compress("".join(lines).encode())
    (folder / "epsilon_normalized.t.bz2").write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()


def test_epsilon_labels_from_the_compressed_file_are_the_readers(tmp_path):
    labels = ["+1", "-1", "-1", "1", "-1", "+1", "1"]
    sha = write_epsilon_test(tmp_path, labels)
    ours = file_labels.epsilon(tmp_path, sha256={"epsilon_normalized.t.bz2": sha})
    assert ours.tolist() == [1, -1, -1, 1, -1, 1, 1]
    src = tmp_path / "epsilon_normalized.t.bz2"
    epsilon_reader.convert(src, tmp_path, epsilon_reader.TEST, features=5, say=lambda _m: None)
    _, theirs = epsilon_reader.read_rows(tmp_path, epsilon_reader.TEST, np.arange(len(labels)))
    np.testing.assert_array_equal(ours, theirs.astype(np.int64))


def test_epsilon_files_that_are_refused(tmp_path):
    with pytest.raises(LabelsUnavailable, match="need .*epsilon_normalized.t.bz2 .*not there"):
        file_labels.epsilon(tmp_path)
    (tmp_path / "epsilon_normalized.t").write_text("+1 1:0.5\n")
    with pytest.raises(LabelsUnavailable, match="publishes no checksum of the plain text"):
        file_labels.epsilon(tmp_path)
    sha = write_epsilon_test(tmp_path, ["+1", "-1"])
    with pytest.raises(LabelsUnavailable, match="wrong checksum .*SHA256"):
        file_labels.epsilon(tmp_path)  # the official checksum: these bytes are not the file
    sha = write_epsilon_test(tmp_path, ["+1", "0", "-1"])
    with pytest.raises(LabelsUnavailable, match="line 2 starts with .*0.*not a label -1 or \\+1"):
        file_labels.epsilon(tmp_path, sha256={"epsilon_normalized.t.bz2": sha})
