"""ImageNet-shaped JPEG files, generated once into the data directory, for runs without it.

A stand-in has to cost what ImageNet costs where the benchmark measures (reading,
decoding, augmenting, a 1,000-way ResNet), so it is made of files that go through the
same pipeline as the real set: `<data dir>/imagenet-synthetic/train/<class>/*.JPEG` and
`val/<class>/*.JPEG`, 1,000 classes, JPEG (quality 90) images of 350 to 500 by 280 to
500 pixels, sizes like most of ImageNet's. Each class owns a random 4 x 4 colour field;
an image is its class's field stretched over the image, plus a fainter field of another
class, a brightness shift and pixel noise. A model can learn the classes in principle,
but nobody calibrated how hard that is: the set measures throughput and checks that a
set-up runs. Its accuracies say nothing about ImageNet, and every run on it says so.

Image i of a split belongs to class i mod 1000 and is drawn from a random stream seeded by
(split, i) alone, so the files are the same on every machine and a set of N images is the
first N of any larger one: asking for more images adds files, never rewrites them.
`manifest.json` records how many of each split are complete; files and the manifest are
written under temporary names and renamed, and a lock file lets one rank (or run) write
while the others wait, so a crash never leaves a set that looks complete.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from mlbench_worker.data import FolderLock
from mlbench_worker.tasks.imagenet import NUM_CLASSES
from mlbench_worker.tasks.imagenet.layout import Split

FOLDER = "imagenet-synthetic"
CLASSES = [f"synthetic{c:04d}" for c in range(NUM_CLASSES)]
TRAIN_SIZE, VAL_SIZE = 10_000, 2_000  # defaults: 10 and 2 images per class
FORMAT = 1  # bump when the images change, so old sets are regenerated
_SPLIT_STREAM = {"train": 1, "val": 2}
_TEMPLATE_STREAM = 0


def root_of(data_dir: str | Path) -> Path:
    return Path(data_dir) / FOLDER


def _templates() -> np.ndarray:
    rng = np.random.default_rng([FORMAT, _TEMPLATE_STREAM])
    return rng.integers(0, 256, size=(NUM_CLASSES, 4, 4, 3), dtype=np.uint8)


def _field(template: np.ndarray, width: int, height: int) -> np.ndarray:
    stretched = Image.fromarray(template).resize((width, height), Image.Resampling.BILINEAR)
    return np.asarray(stretched, dtype=np.int16)


def image_bytes(templates: np.ndarray, split: str, index: int) -> bytes:
    """The JPEG file of image `index` of `split` (class index mod 1000)."""
    rng = np.random.default_rng([FORMAT, _SPLIT_STREAM[split], index])
    label = index % NUM_CLASSES
    other = (label + int(rng.integers(1, NUM_CLASSES))) % NUM_CLASSES
    width, height = int(rng.integers(350, 501)), int(rng.integers(280, 501))
    x = _field(templates[label], width, height) * 3 // 4
    x += _field(templates[other], width, height) // 4
    x += int(rng.integers(-30, 31))
    x += rng.integers(-25, 26, size=x.shape, dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(x, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def name_of(split: str, index: int) -> str:
    """The file of image `index`, relative to the split's folder."""
    return f"{CLASSES[index % NUM_CLASSES]}/{split}_{index:08d}.JPEG"


def _read_manifest(root: Path) -> dict:
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return manifest if manifest.get("format") == FORMAT else {}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def available(data_dir: str | Path, train: int, val: int) -> bool:
    """Whether the manifest says at least `train` and `val` images are complete."""
    manifest = _read_manifest(root_of(data_dir))
    return manifest.get("train", 0) >= train and manifest.get("val", 0) >= val


def ensure(data_dir: str | Path, train: int, val: int, say: Callable[[str], None] = print) -> None:
    """Make sure the first `train` and `val` images exist (writing only the missing ones)."""
    root = root_of(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    with FolderLock(root / ".lock"):
        manifest = _read_manifest(root) or {"format": FORMAT, "train": 0, "val": 0}
        wanted = {"train": train, "val": val}
        todo = {s: (manifest[s], n) for s, n in wanted.items() if manifest[s] < n}
        if not todo:
            return
        say(
            "generating synthetic ImageNet-shaped JPEG files into "
            f"{root}: " + ", ".join(f"{split} {a}..{b - 1}" for split, (a, b) in todo.items())
        )
        templates = _templates()
        for split, (start, stop) in todo.items():
            for folder in {CLASSES[i % NUM_CLASSES] for i in range(start, min(stop, start + 1000))}:
                (root / split / folder).mkdir(parents=True, exist_ok=True)
            for i in range(start, stop):
                _write_atomic(root / split / name_of(split, i), image_bytes(templates, split, i))
            manifest[split] = stop
            _write_atomic(root / "manifest.json", json.dumps(manifest).encode())


def split(data_dir: str | Path, which: str, count: int) -> Split:
    """The first `count` images of a split (generated by `ensure`)."""
    names = np.array([name_of(which, i).encode() for i in range(count)], dtype=np.bytes_)
    labels = np.arange(count, dtype=np.int64) % NUM_CLASSES
    return Split(root_of(data_dir) / which, names, labels)
