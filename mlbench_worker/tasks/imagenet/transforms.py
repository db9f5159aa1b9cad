"""Decoding and augmenting one image: Pillow in, an H x W x 3 uint8 array out.

These are torchvision's transforms (RandomResizedCrop with its defaults, RandomHorizontal-
Flip; Resize of the shorter side and CenterCrop for evaluation), rewritten because
torchvision cannot be imported with the CPU build of torch here. They follow its
arithmetic, so the crops are the ones every ImageNet recipe trains on:

- training: an area of 8 % to 100 % of the image and an aspect ratio between 3/4 and 4/3
  (drawn log-uniformly) are drawn up to 10 times until the box fits in the image, else the
  largest centred box within those ratios; the box is resized to crop x crop with bilinear
  filtering (Pillow's, which anti-aliases when it shrinks, as torchvision's PIL path does);
  then a mirror with probability 1/2. Cropping and resizing are one Pillow call (its `box`
  argument), so no intermediate image is made;
- evaluation: the shorter side resized to `resize` (the longer in proportion, truncated),
  then the centred crop x crop square.

Every random choice comes from a seed given with the image (pipeline.py draws it in the
main process), so a run's augmentation does not depend on how many loader processes ran.
Normalisation happens later, on the whole batch on the training device.
"""

from __future__ import annotations

import math
import random

import numpy as np
from PIL import Image

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)


def random_resized_box(width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
    """(left, top, box width, box height) of a random-resized crop of a width x height image."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def open_rgb(path: str | bytes) -> Image.Image:
    """The decoded image in RGB (ImageNet has some greyscale and CMYK JPEG files)."""
    with Image.open(path) as img:
        return img.convert("RGB")


def train_image(path: str | bytes, crop: int, seed: int) -> np.ndarray:
    """A random-resized crop of the image at `path`, mirrored half the time."""
    rng = random.Random(seed)
    img = open_rgb(path)
    left, top, w, h = random_resized_box(img.width, img.height, rng)
    out = img.resize((crop, crop), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def resized_size(width: int, height: int, shorter: int) -> tuple[int, int]:
    """The size with the shorter side `shorter` and the longer in proportion (truncated)."""
    if width <= height:
        return shorter, int(shorter * height / width)
    return int(shorter * width / height), shorter


def eval_image(path: str | bytes, crop: int, resize: int) -> np.ndarray:
    """The shorter side resized to `resize`, then the centred crop x crop square."""
    img = open_rgb(path)
    w, h = resized_size(img.width, img.height, resize)
    img = img.resize((w, h), Image.Resampling.BILINEAR)
    left, top = round((w - crop) / 2), round((h - crop) / 2)
    return np.asarray(img.crop((left, top, left + crop, top + crop)))
