"""Task 1b's test inputs, made by the evaluator itself for the ONNX audit (model_audit.py).

A task-1b model takes the validation images as the run's evaluation saw them, before its
normalisation: uint8 pixels 0..255, N x 3 x S x S. The evaluator makes them itself, with
Pillow, and runs none of the worker's code (it imports no implementation):

- ``pixels``: the image decoded (converted to RGB: ImageNet holds some greyscale and CMYK
  files), its shorter side resized to R with Pillow's bilinear filter (the longer in
  proportion, truncated), then the centred S x S crop (offsets rounded as Python rounds).
  That is the evaluation transform of the task (tasks/imagenet/transforms.py, torchvision's
  Resize and CenterCrop); R comes from S by the task's rule (imagenet_rules.eval_resize:
  256 for 224, in proportion otherwise). tests/evaluation/test_imagenet_inputs.py holds the
  two to the same pixels.
- the generated set: image i of the validation split, made again in memory from the recipe
  the run's generator writes its files with (shared/imagenet_synthetic.py), never read from
  the files a run's code wrote. A run on the generated set evaluates on its first N images.
- the real set: the image files (.JPEG, .jpg, .png) of ``<data dir>/imagenet/val/<class>/``,
  class folders sorted by name, files sorted by name within each, as the run lists them
  (tasks/imagenet/layout.py); a run that evaluated on N of the M files took N spread evenly
  over that list (file k x M // N for k < N), as ``Split.subset`` does. No checksum covers
  the individual JPEG files (ImageNet publishes none, and the folders are sorted by whoever
  installed the set): the audit runs the model on the files as they are on the master's
  disk, which the run's own evaluation read as well where both share the data directory.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

from mlbench_worker.shared import data_files, imagenet_devkit, imagenet_synthetic
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.imagenet_rules import eval_resize

SUFFIXES = imagenet_devkit.IMAGE_SUFFIXES  # the files a run's listing takes (case aside)


def pixels(image: bytes | str | Path, crop: int, resize: int) -> np.ndarray:
    """`image` (a file's bytes, or its path) as the evaluation sees it: uint8 3 x crop x crop."""
    with Image.open(io.BytesIO(image) if isinstance(image, bytes) else image) as opened:
        img = opened.convert("RGB")
    width, height = img.size
    if width <= height:
        size = (resize, int(resize * height / width))
    else:
        size = (int(resize * width / height), resize)
    img = img.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - crop) / 2), round((size[1] - crop) / 2)
    return np.asarray(img.crop((left, top, left + crop, top + crop))).transpose(2, 0, 1)


def synthetic(rows: np.ndarray, crop: int) -> np.ndarray:
    """Images `rows` of the generated validation set, made again in memory: uint8,
    len(rows) x 3 x crop x crop, in the order of `rows`."""
    rows = np.asarray(rows, dtype=np.int64)
    fields = imagenet_synthetic.templates()
    resize = eval_resize(crop)
    out = np.empty((rows.size, 3, crop, crop), dtype=np.uint8)
    for k, row in enumerate(rows):
        out[k] = pixels(imagenet_synthetic.image_bytes(fields, "val", int(row)), crop, resize)
    return out


def real_files(data_dir: str | Path, size: int) -> list[Path]:
    """The `size` validation files a run that evaluated on `size` images read, in its order
    (see the module's docstring); LabelsUnavailable where the folder is missing or holds
    fewer files."""
    val = Path(data_dir) / data_files.IMAGENET_FOLDER / "val"
    try:
        with os.scandir(val) as entries:
            folders = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
        files = []
        for folder in folders:
            with os.scandir(val / folder) as entries:
                names = sorted(
                    e.name for e in entries if e.is_file() and e.name.lower().endswith(SUFFIXES)
                )
            files += [val / folder / name for name in names]
    except OSError as exc:
        raise LabelsUnavailable(
            f"cannot list ImageNet's validation images in {val}: {exc}"
        ) from None
    if size > len(files):
        raise LabelsUnavailable(f"{val} holds {len(files)} images in class folders, not {size}")
    return [files[int(k)] for k in imagenet_devkit.spread(len(files), size)]


def real(data_dir: str | Path, size: int, rows: np.ndarray, crop: int) -> np.ndarray:
    """Images `rows` of the `size` validation images a run evaluated on, read from the sorted
    folders under `data_dir`: uint8, len(rows) x 3 x crop x crop, in the order of `rows`."""
    files = real_files(data_dir, size)
    resize = eval_resize(crop)
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((rows.size, 3, crop, crop), dtype=np.uint8)
    for k, row in enumerate(rows):
        try:
            out[k] = pixels(files[int(row)], crop, resize)
        except OSError as exc:  # Pillow's error for a file it cannot read or decode
            raise LabelsUnavailable(f"cannot read image {files[int(row)]}: {exc}") from exc
    return out
