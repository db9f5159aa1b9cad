"""Where ImageNet lives under the data directory, and the list of its files.

The layout is the one nearly every ImageNet tool reads (torchvision's ImageFolder, the
MLPerf reference, timm): `<data dir>/imagenet/train/<wnid>/*.JPEG` with one folder per
class, named by its WordNet id (n01440764 ...), and `<data dir>/imagenet/val/<wnid>/*.JPEG`
the same way. A class's label is its folder's position among the training folders sorted
by name, so labels are the same on every machine and match the usual numbering.

ImageNet cannot be downloaded without an account, so nothing here downloads: a missing set
raises DataUnavailable with a message that says where to put which files (`auto` then falls
back to synthetic data); a set that is there but wrong raises WorkerError naming the
problem. File names are kept as one numpy byte-string array, not a list of Python strings:
1.28 million names cost ~60 MB once, and DataLoader worker processes share the array's
pages instead of copying them as reference counts change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.data import DataUnavailable
from mlbench_worker.shared import data_files, imagenet_devkit
from mlbench_worker.tasks.imagenet import NUM_CLASSES
from mlbench_worker.training.errors import WorkerError

FOLDER = data_files.IMAGENET_FOLDER  # "imagenet": the evaluator looks there too
IMAGE_SUFFIXES = imagenet_devkit.IMAGE_SUFFIXES  # the evaluator checks the same files
SORT_COMMAND = "python -m mlbench_worker.tasks.imagenet.sort_val"


@dataclass
class Split:
    """One split's images: paths relative to the split's folder, and their labels."""

    folder: Path
    names: np.ndarray  # bytes, "<wnid>/<file>"
    labels: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, count: int | None) -> Split:
        """`count` images spread evenly over the list (so every class keeps its share), or
        all of them; a smoke test on real data then still sees every class. The evaluator
        picks the same validation rows (shared/imagenet_devkit.py holds the rule)."""
        if not count or count >= len(self):
            return self
        pick = imagenet_devkit.spread(len(self), count)
        return Split(self.folder, self.names[pick], self.labels[pick])


@dataclass
class Listing:
    root: Path
    classes: list[str]  # label -> class folder name
    train: Split
    val: Split


def root_of(data_dir: str | Path) -> Path:
    return Path(data_dir) / FOLDER


def missing_message(root: Path, what: str) -> str:
    """What a user must do to provide ImageNet at `root` (`what`: what was not found)."""
    return (
        f"ImageNet not found: {what}. Put the ILSVRC2012 training images at "
        f"{root}/train/<wnid>/*.JPEG (1000 class folders) and the validation images at "
        f"{root}/val/<wnid>/*.JPEG; the validation set as distributed (one folder of "
        f"50,000 files and a label file) is sorted into that layout once with `{SORT_COMMAND} "
        f"{root}/val --labels LABEL_FILE`. ImageNet needs an account to download "
        f"(https://image-net.org/); docs/tasks.rst, task 1b, has the steps. Or pass "
        f"--data-dir with the folder that holds imagenet/, or --dataset synthetic"
    )


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def class_folders(split_dir: Path) -> list[str]:
    """The sub-folders of a split, sorted by name (hidden ones ignored)."""
    with os.scandir(split_dir) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def scan(split_dir: Path, classes: list[str], required: bool = True) -> Split:
    """Every image in `split_dir/<class>/` for the given classes, labelled by position.

    `required`: every class must have a folder with at least one image (training); else a
    class may be absent (a validation subset). Folders of unknown classes and images lying
    directly in `split_dir` are errors: they mean the set is not in the expected layout.
    """
    known = set(classes)
    with os.scandir(split_dir) as entries:
        loose, unknown = 0, []
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir() and e.name not in known:
                unknown.append(e.name)
            elif e.is_file() and _is_image(e.name):
                loose += 1
    if loose:
        raise WorkerError(
            f"{split_dir} holds {loose} image files directly instead of in one folder per "
            f"class: sort them with `{SORT_COMMAND} {split_dir} --labels LABEL_FILE` "
            "(docs/tasks.rst, task 1b)",
            exit_code=1,
        )
    if unknown:
        raise WorkerError(
            f"{split_dir} has class folders that the training set does not have: "
            f"{', '.join(sorted(unknown)[:5])}{' ...' if len(unknown) > 5 else ''}",
            exit_code=1,
        )
    names: list[bytes] = []
    labels: list[int] = []
    for label, wnid in enumerate(classes):
        folder = split_dir / wnid
        if not folder.is_dir():
            if required:
                raise WorkerError(f"{folder} is missing (class {label})", exit_code=1)
            continue
        with os.scandir(folder) as entries:
            files = sorted(e.name for e in entries if e.is_file() and _is_image(e.name))
        if not files and required:
            raise WorkerError(f"{folder} holds no image files (.JPEG, .jpg, .png)", exit_code=1)
        names += [f"{wnid}/{f}".encode() for f in files]
        labels += [label] * len(files)
    if not names:
        raise WorkerError(f"{split_dir} holds no image files in class folders", exit_code=1)
    return Split(split_dir, np.array(names, dtype=np.bytes_), np.array(labels, dtype=np.int64))


def find(data_dir: str | Path, num_classes: int = NUM_CLASSES) -> Listing:
    """The real ImageNet under `data_dir`: DataUnavailable when absent, WorkerError when
    present but not in the layout (the message says which folder and what is wrong)."""
    root = root_of(data_dir)
    train_dir, val_dir = root / "train", root / "val"
    for folder in (root, train_dir, val_dir):
        if not folder.is_dir():
            raise DataUnavailable(missing_message(root, f"{folder} does not exist"))
    classes = class_folders(train_dir)
    if not classes:
        raise DataUnavailable(missing_message(root, f"{train_dir} has no class folders"))
    if len(classes) != num_classes:
        raise WorkerError(
            f"{train_dir} has {len(classes)} class folders; ImageNet (ILSVRC2012) has "
            f"{num_classes}, one per WordNet id (n01440764 ...). Results on another set of "
            "classes would not be comparable: complete the set or use --dataset synthetic",
            exit_code=1,
        )
    return Listing(root, classes, scan(train_dir, classes), scan(val_dir, classes, False))
