"""The official files of the real data sets, by name and checksum, and a safe reader of
CIFAR-10's pickled batches.

Two readers of the same files exist on purpose: the tasks' (tasks/cifar10/reader.py,
tasks/epsilon/reader.py), which feed training, and the evaluator's
(shared/evaluation/file_labels.py), which must not trust them. What both must agree on,
the names and checksums that say a file is the official one, is written here once.
ImageNet's development kit is parsed in one place for both (shared/imagenet_devkit.py).
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import BinaryIO

CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TEST_FILE = "test_batch"
CIFAR10_FILE_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}

EPSILON_FILES = {"train": "epsilon_normalized", "test": "epsilon_normalized.t"}
# SHA-256 of the LIBSVM collection's compressed files, as two independent public benchmark
# suites that download them record them (LIBSVM itself publishes no checksums).
EPSILON_SHA256 = {
    "epsilon_normalized.bz2": "aff916d4f97f18d286558ca088d2a9f7e1fcee9376539a5aa6ef5b7ef9dfa978",
    "epsilon_normalized.t.bz2": "cb299295ad11e200696eaa3050f5d8cf700eaa9c65e6aa859bda959f8669458b",
}

IMAGENET_FOLDER = "imagenet"  # <data dir>/imagenet/: train/, val/ and the development kit
IMAGENET_DEVKIT_ARCHIVE = "ILSVRC2012_devkit_t12.tar.gz"
# The kit archive's published MD5 (torchvision's ImageNet verifies the same value).
IMAGENET_DEVKIT_MD5 = "fa75699e90414af021442c21a62c3abf"


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest (`algorithm`: "md5", "sha256") of a file, read in 1 MiB pieces."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ArrayUnpickler(pickle.Unpickler):
    """Builds only numpy arrays and dtypes: CIFAR-10's batch files need nothing else, so a
    tampered file cannot run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected object {module}.{name}")


def unpickle_batch(fh: BinaryIO) -> dict:
    """One CIFAR-10 batch as a dict with str keys; ValueError or UnpicklingError if it is
    not one (the callers name the file)."""
    raw = ArrayUnpickler(fh, encoding="bytes").load()
    if not isinstance(raw, dict):
        raise ValueError(f"expected a dict, found {type(raw).__name__}")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
