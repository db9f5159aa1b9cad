"""ImageNet's development kit, read once for everyone, and the order of the validation set.

The ILSVRC2012 development kit (``ILSVRC2012_devkit_t12.tar.gz``) says which class every
validation image belongs to, in two files:

- ``data/ILSVRC2012_validation_ground_truth.txt``: line k holds the ILSVRC2012_ID (1..1000)
  of ``ILSVRC2012_val_<k, 8 digits>.JPEG``;
- ``data/meta.mat``: the ``synsets`` struct array, ILSVRC2012_ID -> WNID (the WordNet id
  that names a class folder, n01440764 ...). IDs 1..1000 are the classification task's
  classes (the kit's "low level synsets"); the rest are the WordNet hierarchy above them.
  Read with scipy (imported only when a meta.mat is read: the evaluator's one use of it).

Two readers use them and must not differ: the worker's ``sort_val`` command, which sorts
the validation images into class folders, and the evaluator
(``shared/evaluation/file_labels.py``), which reads the labels of real ImageNet from the
archive itself rather than from those folders. Both read the files here.

The worker's rules, written down for the evaluator, which may not import the task's code
(``tasks/imagenet/layout.py`` uses them from here):

- a class's label is the position of its WNID among the 1000 class WNIDs sorted (the worker
  sorts its 1000 training folders, named by WNID);
- the validation set is listed class by class in label order, and within a class by file
  name, which for the kit's names (one fixed width, 8 zero-padded digits) is by number k;
- a run that evaluates on fewer images (``--test-images N``) takes N spread evenly over
  that list (``spread``), not the first N.

Hand-written: a few lines of text and one scipy call. The tests build small kits in the
real format; no real kit is read in them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

CLASSES = 1000  # the ILSVRC2012_IDs 1..1000 are the classes
META = "ILSVRC2012_devkit_t12/data/meta.mat"  # the archive's members
GROUND_TRUTH = "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt"
VAL_STEM = "ILSVRC2012_val_{:08d}"  # the validation image of ground-truth line k, less ".JPEG"
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")  # the files the worker lists (lower-cased)


class DevkitError(ValueError):
    """A development kit file that cannot be read as one. The message says what is wrong
    as a predicate ("has no synsets", "line 3: ..."): the caller puts the file's name first."""


def read_meta(source: bytes | Path) -> dict[int, str]:
    """ILSVRC2012_ID -> WNID of every synset in a meta.mat (its bytes, or its path)."""
    try:
        from scipy.io import loadmat
    except ImportError as exc:  # the worker and the master have it; a bare client may not
        raise DevkitError(f"cannot be read without scipy (pip install scipy): {exc}") from exc
    try:
        mat = loadmat(
            io.BytesIO(source) if isinstance(source, bytes) else str(source), squeeze_me=True
        )
    except Exception as exc:  # scipy raises several kinds for a file that is not a .mat
        raise DevkitError(f"is not a MATLAB file scipy can read: {exc}") from exc
    if "synsets" not in mat:
        raise DevkitError(f"has no synsets (it holds {sorted(k for k in mat if k[:2] != '__')})")
    synsets = np.atleast_1d(mat["synsets"])
    names = synsets.dtype.names or ()
    if "ILSVRC2012_ID" not in names or "WNID" not in names:
        raise DevkitError(f"has synsets without ILSVRC2012_ID and WNID (fields: {list(names)})")
    out: dict[int, str] = {}
    for s in synsets:
        try:
            number, wnid = int(s["ILSVRC2012_ID"]), s["WNID"]
        except (TypeError, ValueError) as exc:
            raise DevkitError(f"has a synset whose ILSVRC2012_ID is not a number: {exc}") from exc
        if not isinstance(wnid, str) or not wnid:
            raise DevkitError(f"has synset {number} without a WNID ({wnid!r})")
        if number in out:
            raise DevkitError(f"has ILSVRC2012_ID {number} twice")
        out[number] = wnid
    return out


def read_ground_truth(raw: bytes | str) -> np.ndarray:
    """The ILSVRC2012_IDs of the validation images (int64, element k-1 for line k), each
    checked to be a class number 1..1000."""
    try:
        text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise DevkitError(f"is not text: {exc}") from exc
    lines = text.rstrip().splitlines()
    if not lines:
        raise DevkitError("is empty")
    ids = np.empty(len(lines), dtype=np.int64)
    for k, line in enumerate(lines, start=1):
        word = line.strip()
        if not (word.isascii() and word.isdigit()) or not 1 <= int(word) <= CLASSES:
            raise DevkitError(
                f"line {k}: {word[:20]!r} is not a class number 1..{CLASSES}"
                if word
                else f"line {k} is empty"
            )
        ids[k - 1] = int(word)
    return ids


def val_wnids(ground_truth: np.ndarray, meta: dict[int, str]) -> dict[str, str]:
    """Validation file name without extension -> WNID (the sort command's question)."""
    out = {}
    for k, number in enumerate(ground_truth.tolist(), start=1):
        if number not in meta:
            raise DevkitError(f"line {k}: class number {number} is not in the meta.mat")
        out[VAL_STEM.format(k)] = meta[number]
    return out


def class_wnids(meta: dict[int, str]) -> list[str]:
    """The 1000 classes' WNIDs sorted: a class's label is its position here."""
    missing = [n for n in range(1, CLASSES + 1) if n not in meta]
    if missing:
        raise DevkitError(
            f"has no synset with ILSVRC2012_ID {missing[0]} ({len(missing)} of the class "
            f"numbers 1..{CLASSES} missing)"
        )
    wnids = sorted(meta[n] for n in range(1, CLASSES + 1))
    twice = [a for a, b in zip(wnids, wnids[1:], strict=False) if a == b]
    if twice:
        raise DevkitError(f"names WNID {twice[0]} for two class numbers")
    return wnids


def val_order(ground_truth: np.ndarray, meta: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """(file numbers k, labels) of every validation image, in the order the worker lists
    the sorted folders: by label, then by file name (= by k). The labels come out sorted,
    as the listing is; which file is which row matters to the inputs, not the labels."""
    index = {wnid: label for label, wnid in enumerate(class_wnids(meta))}
    labels = np.array([index[meta[n]] for n in ground_truth.tolist()], dtype=np.int64)
    order = np.argsort(labels, kind="stable")  # stable: equal labels keep k's order
    return order + 1, labels[order]


def spread(total: int, count: int) -> np.ndarray:
    """The positions of `count` items spread evenly over a list of `total` (count <= total):
    every class of a sorted listing keeps its share."""
    return np.arange(count, dtype=np.int64) * total // count
