"""The recipe of task 1b's synthetic (ImageNet-shaped) JPEG files, written once: the run's
generator (tasks/imagenet/synthetic.py, which writes them to disk) and the evaluator's audit
(shared/evaluation/imagenet_inputs.py, which makes the sampled images again in memory) both
call it, so the evaluator never reads a file the run's code wrote.

1,000 classes, JPEG (quality 90) images of 350 to 500 by 280 to 500 pixels. Each class owns
a random 4 x 4 colour field (``default_rng([FORMAT, 0])``); image i of a split belongs to
class i mod 1000 and draws from ``default_rng([FORMAT, stream, i])`` (stream 1 for train, 2
for val): another class, a width and a height; the image is its class's field stretched
over it (Pillow's bilinear resize) x 3/4, plus the other class's x 1/4, a brightness shift
in -30..30 and int16 pixel noise in -25..25, clipped to 0..255. Image i depends on (split,
i) alone, so a set of N images is the first N of any larger one.

numpy and Pillow only (no torch): the evaluator is allowed both.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from mlbench_worker.shared.imagenet_rules import NUM_CLASSES

CLASSES = [f"synthetic{c:04d}" for c in range(NUM_CLASSES)]  # the class folders' names
FORMAT = 1  # bump when the images change, so old sets are regenerated
SPLIT_STREAM = {"train": 1, "val": 2}
TEMPLATE_STREAM = 0


def templates() -> np.ndarray:
    """Every class's 4 x 4 colour field: uint8, 1000 x 4 x 4 x 3."""
    rng = np.random.default_rng([FORMAT, TEMPLATE_STREAM])
    return rng.integers(0, 256, size=(NUM_CLASSES, 4, 4, 3), dtype=np.uint8)


def _field(template: np.ndarray, width: int, height: int) -> np.ndarray:
    stretched = Image.fromarray(template).resize((width, height), Image.Resampling.BILINEAR)
    return np.asarray(stretched, dtype=np.int16)


def image_bytes(fields: np.ndarray, split: str, index: int) -> bytes:
    """The JPEG file of image `index` of `split` (class index mod 1000); `fields`: what
    `templates()` returns (drawn once for many images)."""
    rng = np.random.default_rng([FORMAT, SPLIT_STREAM[split], index])
    label = index % NUM_CLASSES
    other = (label + int(rng.integers(1, NUM_CLASSES))) % NUM_CLASSES
    width, height = int(rng.integers(350, 501)), int(rng.integers(280, 501))
    x = _field(fields[label], width, height) * 3 // 4
    x += _field(fields[other], width, height) // 4
    x += int(rng.integers(-30, 31))
    x += rng.integers(-25, 26, size=x.shape, dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(x, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def name_of(split: str, index: int) -> str:
    """The file of image `index`, relative to the split's folder."""
    return f"{CLASSES[index % NUM_CLASSES]}/{split}_{index:08d}.JPEG"
