"""Batches of ImageNet images for the Trainer, decoded by DataLoader worker processes.

`ImageBatches` has the interface training.trainer.Trainer reads (`len()`, `steps(n)`,
`iterate(indices, generator)`, as data/loader.py's Batches): the Trainer picks each
rank's indices (disjoint shards, reshuffled every epoch) and this class turns them into
batches. A whole batch is one DataLoader item: a worker process decodes and augments its
images (transforms.py) and stacks them into one uint8 array, so only finished batches
cross between processes, `workers` batches are in preparation at a time and twice as many
wait ready. The main process pins them (on CUDA), copies them to the device as uint8
(a quarter of the bytes of float32) and normalises them there in one multiply-add.

A batch arrives as N x H x W x 3: viewed as N x 3 x H x W it already has the channels_last
layout, so `channels_last` costs no reordering; otherwise it is made contiguous NCHW.

The seeds of the augmentation are drawn from the Trainer's generator in the main process,
one per image, so the crops of a run are the same whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from mlbench_worker.data.loader import Normalize
from mlbench_worker.tasks.imagenet import CROP, IMAGENET_MEAN, IMAGENET_STD, RESIZE
from mlbench_worker.tasks.imagenet.layout import Split
from mlbench_worker.tasks.imagenet.transforms import eval_image, train_image


class BatchReader(torch.utils.data.Dataset):
    """Item = one batch: (indices, seeds) -> (uint8 N x H x W x 3, int64 labels)."""

    def __init__(self, split: Split, train: bool, crop: int, resize: int) -> None:
        self.folder = str(split.folder).encode()
        self.names = split.names
        self.labels = split.labels
        self.train = train
        self.crop = crop
        self.resize = resize

    def __len__(self) -> int:
        return len(self.labels)

    def image(self, index: int, seed: int) -> np.ndarray:
        path = self.folder + b"/" + self.names[index]
        try:
            if self.train:
                return train_image(path, self.crop, seed)
            return eval_image(path, self.crop, self.resize)
        except OSError as exc:  # Pillow's error for a file it cannot read or decode
            raise RuntimeError(f"cannot read image {path.decode()}: {exc}") from exc

    def __getitem__(self, batch: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, ...]:
        indices, seeds = batch
        images = np.stack([self.image(int(i), int(s)) for i, s in zip(indices, seeds, strict=True)])
        return torch.from_numpy(images), torch.from_numpy(self.labels[indices])


class ImageBatches:
    """One split of ImageNet (or its synthetic stand-in) as batches on `device`."""

    def __init__(
        self,
        split: Split,
        batch_size: int,
        *,
        train: bool,
        device: torch.device | str = "cpu",
        channels_last: bool = False,
        workers: int = 0,
        crop: int = CROP,
        resize: int = RESIZE,
    ) -> None:
        self.split = split
        self.reader = BatchReader(split, train, crop, resize)
        self.batch_size = batch_size
        self.train = train
        self.device = torch.device(device)
        self.channels_last = channels_last
        self.workers = workers
        self.crop = crop
        self.normalize = Normalize(IMAGENET_MEAN, IMAGENET_STD, self.device, channels_last)

    def __len__(self) -> int:
        return len(self.split)

    @property
    def folder(self) -> Path:
        return self.split.folder

    def steps(self, count: int) -> int:
        """Number of batches for `count` indices (the last one may be smaller)."""
        return -(-count // self.batch_size)

    def iterate(
        self, indices: np.ndarray, generator: torch.Generator | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches over `indices` in their order; `generator` seeds the augmentation."""
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        if self.train:
            seeds = torch.randint(0, 2**62, (len(idx),), generator=generator).numpy()
        else:
            seeds = np.zeros(len(idx), dtype=np.int64)
        plan = [
            (idx[s : s + self.batch_size], seeds[s : s + self.batch_size])
            for s in range(0, len(idx), self.batch_size)
        ]
        loader = DataLoader(
            self.reader,
            batch_size=None,  # an item is already a batch
            sampler=plan,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=2 if self.workers else None,
        )
        for x, y in loader:
            yield self.to_device(x, y)

    def to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 N x H x W x 3 -> normalised float32 N x 3 x H x W on the device."""
        x = x.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
        y = y.to(self.device, non_blocking=True)
        return self.normalize(x), y
