"""Task 1b's code: ResNet on ImageNet, from JPEG files on disk to a Trainer.

The modules, in the order data flows:

- layout.py: where ImageNet lives under the data directory, and listing its files
  (`train/<wnid>/*.JPEG`, `val/<wnid>/*.JPEG`); what to say when it is missing;
- sort_val.py: `python -m mlbench_worker.tasks.imagenet.sort_val`, which sorts the validation
  set as distributed (50,000 files in one folder and a label file) into that layout once;
- synthetic.py: ImageNet-shaped JPEG files, generated once into the data directory, for
  runs without the real set (the recipe of each file is shared/imagenet_synthetic.py's,
  which the evaluator regenerates for the audit);
- transforms.py: decoding (Pillow) and the augmentations (random-resized crop and flip
  for training; resize and centre crop for evaluation);
- pipeline.py: batches for the Trainer, decoded by DataLoader worker processes;
- data.py: the choice between real and synthetic, agreed by all ranks;
- train.py: the Trainer with top-5 accuracy, and the cosine and poly (MLPerf) schedules;
- setup.py: one run's pieces.

This top level imports neither torch nor Pillow.
"""

from __future__ import annotations

# The classes, the benchmark's crop and resize: shared with the evaluator, written once.
from mlbench_worker.shared.imagenet_rules import CROP, NUM_CLASSES, RESIZE

__all__ = ["CROP", "IMAGENET_MEAN", "IMAGENET_STD", "NUM_CLASSES", "RESIZE"]

# Per-channel mean and standard deviation of ImageNet's training images (0..1 units): the
# values every public ImageNet recipe normalises with.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
