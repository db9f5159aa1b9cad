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
- ImageNet: the development kit ``imagenet/ILSVRC2012_devkit_t12.tar.gz`` (the archive's
  MD5, then its ground truth and meta.mat, parsed by shared/imagenet_devkit.py), never the
  class folders the validation images were sorted into, which no checksum covers. The
  labels are put in the order the worker lists its sorted folders (by class, then by file
  name; ``imagenet``), and a run on fewer images gets the rows it picks (``imagenet_subset``).
  Where the sorted folders are under the data directory too, every image must be in the
  folder the kit names. Only the format is tested (small kits built by the tests): there is
  no real ImageNet here.

Checksums can be given (`md5`, `sha256`) so tests can use small files in the real format.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np

from mlbench_worker.shared import data_files, imagenet_devkit


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


def _devkit_members(archive: Path) -> tuple[bytes, bytes]:
    """(ground truth, meta.mat) read from the kit's archive."""
    found = {}
    member = imagenet_devkit.GROUND_TRUTH
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in (imagenet_devkit.GROUND_TRUTH, imagenet_devkit.META):
                src = tar.extractfile(member)
                if src is None:
                    raise KeyError(f"{member} is not a file")
                found[member] = src.read()
    except (tarfile.TarError, OSError, EOFError, KeyError) as exc:
        raise LabelsUnavailable(f"{archive} has no readable {member}: {exc}") from exc
    return found[imagenet_devkit.GROUND_TRUTH], found[imagenet_devkit.META]


def _check_sorted_val(val_dir: Path, expected: dict[str, str]) -> None:
    """Every image in the sorted validation folders `val_dir` must be in the folder the kit
    names (`expected`: file name without extension -> WNID), and none may be missing: runs
    read their images, and so their labels, from such folders."""
    found = sorted(
        (d.name, f.name)
        for d in val_dir.iterdir()
        if d.is_dir() and not d.name.startswith(".")
        for f in d.iterdir()
        if f.is_file() and f.name.lower().endswith(imagenet_devkit.IMAGE_SUFFIXES)
    )
    if not found:
        return  # not sorted here (or empty): nothing to compare
    for folder, name in found:
        should = expected.get(name.rsplit(".", 1)[0])
        if should != folder:
            where = f"it belongs in {should}/" if should else "the kit lists no such image"
            raise LabelsUnavailable(
                f"{val_dir / folder / name} is not where the development kit puts it ({where}): "
                f"a run that reads {val_dir} would be graded against labels it did not train "
                f"and evaluate with; sort the folder again from the kit's ground truth"
            )
    if len(found) != len(expected):
        raise LabelsUnavailable(
            f"{val_dir} holds {len(found)} of the {len(expected)} validation images the "
            "development kit lists: a run on an incomplete set evaluates other images"
        )


def imagenet(data_dir: str | Path, md5: str | None = None) -> np.ndarray:
    """The labels of ImageNet's validation images (50,000 in the real kit) from the
    development kit archive ``<data dir>/imagenet/ILSVRC2012_devkit_t12.tar.gz``, its MD5
    verified first.

    The order is the worker's (tasks/imagenet/layout.py), derived from the kit alone, never
    from a folder: image ``ILSVRC2012_val_<k>`` gets the label of its class (the position of
    the class's WNID among the 1000 sorted), and the images are ordered by that label, then
    by file name (by k: the names have one width). The labels therefore come out sorted;
    which image is which row matters to the model audit's inputs, not to them.

    When ``<data dir>/imagenet/val`` holds the sorted images too, each must be in its
    class's folder and none missing (``_check_sorted_val``), else LabelsUnavailable naming
    the first misplaced file."""
    root = Path(data_dir) / data_files.IMAGENET_FOLDER
    archive = root / data_files.IMAGENET_DEVKIT_ARCHIVE
    if not archive.is_file():
        raise LabelsUnavailable(
            f"ImageNet's validation labels need the ILSVRC2012 development kit at {archive}, "
            f"which is not there: download {data_files.IMAGENET_DEVKIT_ARCHIVE} from "
            "https://image-net.org/ (an account is needed) and keep the archive as it is, "
            f"beside {root}/train and val: its checksum is what the evaluator verifies "
            "(docs/tasks.rst, task 1b)"
        )
    _checked(archive, "md5", md5 or data_files.IMAGENET_DEVKIT_MD5)
    raw_truth, raw_meta = _devkit_members(archive)
    try:
        ground_truth = imagenet_devkit.read_ground_truth(raw_truth)
    except imagenet_devkit.DevkitError as exc:
        raise LabelsUnavailable(f"{archive}:{imagenet_devkit.GROUND_TRUTH} {exc}") from exc
    try:
        meta = imagenet_devkit.read_meta(raw_meta)
        imagenet_devkit.class_wnids(meta)
    except imagenet_devkit.DevkitError as exc:
        raise LabelsUnavailable(f"{archive}:{imagenet_devkit.META} {exc}") from exc
    _, labels = imagenet_devkit.val_order(ground_truth, meta)
    if (root / "val").is_dir():
        _check_sorted_val(root / "val", imagenet_devkit.val_wnids(ground_truth, meta))
    return labels


def imagenet_subset(labels: np.ndarray, size: int) -> np.ndarray:
    """The labels of the `size` validation images a run evaluated on: all of them, or
    `size` spread evenly over the sorted list (``--test-images``, as the worker's
    Split.subset picks them), not the first `size`."""
    return labels[imagenet_devkit.spread(labels.size, size)]
