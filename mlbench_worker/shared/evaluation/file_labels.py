"""The labels of the real test sets, read by the evaluator from the official files.

The evaluator reads only files whose checksum it knows (mlbench_worker/shared/data_files.py)
and verifies it first, so a grade never rests on a file someone edited, or on the training
code's caches (the .npy copies under the data directory carry no checksum and are not read
here):

- CIFAR-10: ``cifar-10-batches-py/test_batch`` (MD5), else the same member of
  ``cifar-10-python.tar.gz`` (the archive's MD5, then the member's);
- epsilon: ``epsilon_normalized.t.bz2`` (SHA-256), decompressed as it is read, the first
  field of each line; LIBSVM publishes the plain text with no checksum, so a data directory
  that holds only the plain file is refused with a message saying what to keep.
- ImageNet: not built yet. Its labels are the class folders a person sorted the
  validation images into, and no checksum covers that; the refusal says so.

Checksums can be given (`md5`, `sha256`) so tests can use small files in the real format.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np

from mlbench_worker.shared import data_files


class LabelsUnavailable(Exception):
    """The test set's labels cannot be had, or not from a file the evaluator can trust."""


def _checked(path: Path, algorithm: str, expected: str) -> None:
    got = data_files.file_digest(path, algorithm)
    if got != expected:
        raise LabelsUnavailable(
            f"{path} has the wrong checksum ({algorithm.upper()} {got}, expected {expected}): "
            "it is damaged or not the official file, so the evaluator will not read labels "
            "from it"
        )


def _cifar10_batch(raw: bytes, where: str) -> dict:
    try:
        return data_files.unpickle_batch(io.BytesIO(raw))
    except Exception as exc:  # checksummed, so this would be our parser's fault
        raise LabelsUnavailable(f"{where} cannot be parsed as a CIFAR-10 batch: {exc}") from exc


def _cifar10_batch_labels(batch: dict, where: str) -> np.ndarray:
    try:
        labels = np.asarray(batch["labels"], dtype=np.int64)
    except Exception as exc:
        raise LabelsUnavailable(f"{where} cannot be parsed as a CIFAR-10 batch: {exc}") from exc
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise LabelsUnavailable(f"{where} holds labels outside 0..9")
    return labels


def cifar10_test_batch(data_dir: str | Path, md5: dict[str, str] | None = None) -> tuple[dict, str]:
    """CIFAR-10's test batch (its dict: ``data``, ``labels``...) from the official files under
    `data_dir`, checksums verified, and where it was read; the labels' and the audit's
    inputs' one source (file_inputs.py)."""
    md5 = md5 or {
        data_files.CIFAR10_ARCHIVE: data_files.CIFAR10_ARCHIVE_MD5,
        **data_files.CIFAR10_FILE_MD5,
    }
    data_dir = Path(data_dir)
    name = data_files.CIFAR10_TEST_FILE
    path = data_dir / data_files.CIFAR10_FOLDER / name
    if path.is_file():
        _checked(path, "md5", md5[name])
        return _cifar10_batch(path.read_bytes(), str(path)), str(path)
    archive = data_dir / data_files.CIFAR10_ARCHIVE
    if not archive.is_file():
        raise LabelsUnavailable(
            f"CIFAR-10's test labels are not under {data_dir}: neither {path} nor {archive} exists"
        )
    _checked(archive, "md5", md5[data_files.CIFAR10_ARCHIVE])
    member = f"{data_files.CIFAR10_FOLDER}/{name}"
    try:
        with tarfile.open(archive, "r:gz") as tar:
            src = tar.extractfile(member)
            if src is None:
                raise KeyError(member)
            raw = src.read()
    except (tarfile.TarError, OSError, KeyError) as exc:
        raise LabelsUnavailable(f"{archive} has no readable {member}: {exc}") from exc
    got = hashlib.md5(raw).hexdigest()
    if got != md5[name]:
        raise LabelsUnavailable(f"{archive}'s {member} has MD5 {got}, expected {md5[name]}")
    where = f"{archive}:{member}"
    return _cifar10_batch(raw, where), where


def cifar10(data_dir: str | Path, md5: dict[str, str] | None = None) -> np.ndarray:
    """The 10,000 test labels of CIFAR-10 from the official files under `data_dir`."""
    batch, where = cifar10_test_batch(data_dir, md5)
    return _cifar10_batch_labels(batch, where)


def epsilon_test_file(data_dir: str | Path, sha256: dict[str, str] | None = None) -> Path:
    """epsilon's official compressed test file under `data_dir`, its SHA-256 verified."""
    sha256 = sha256 or data_files.EPSILON_SHA256
    plain = data_files.EPSILON_FILES["test"]
    name = f"{plain}.bz2"
    path = Path(data_dir) / name
    if not path.is_file():
        only_plain = (Path(data_dir) / plain).is_file()
        raise LabelsUnavailable(
            f"epsilon's test labels need {path} (its SHA-256 is known; "
            + (
                f"{Path(data_dir) / plain} is there, but LIBSVM publishes no checksum of the "
                "plain text: keep the .bz2 file beside it)"
                if only_plain
                else "it is not there)"
            )
        )
    _checked(path, "sha256", sha256[name])
    return path


def epsilon_label(first: bytes, path: Path, number: int) -> int:
    """The label a line of epsilon's file starts with (its first field), -1 or +1."""
    value = {b"1": 1, b"+1": 1, b"-1": -1}.get(first)
    if value is None:
        raise LabelsUnavailable(f"{path} line {number} starts with {first!r}, not a label -1 or +1")
    return value


def epsilon(data_dir: str | Path, sha256: dict[str, str] | None = None) -> np.ndarray:
    """epsilon's test labels (int64, -1/+1, one per row) from the official compressed file."""
    path = epsilon_test_file(data_dir, sha256)
    labels: list[int] = []
    with bz2.open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            first = line.split(maxsplit=1)[:1]
            labels.append(epsilon_label(first[0] if first else b"", path, number))
    return np.array(labels, dtype=np.int64)
