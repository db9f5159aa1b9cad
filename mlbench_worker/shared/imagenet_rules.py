"""Task 1b's numbers that the run's pipeline (tasks/imagenet/) and the evaluator
(shared/evaluation/imagenet_inputs.py) both apply, written once: the classes, the
benchmark's crop, the crops a run may use instead (``--crop``), and the evaluation's resize
of the shorter side for a crop. Plain Python: the master, the evaluator and the worker's
option parser read it without torch or Pillow.
"""

from __future__ import annotations

NUM_CLASSES = 1000
# The benchmark's crop, and the evaluation's resize of the shorter side before it.
CROP, RESIZE = 224, 256
# The crops `--crop` accepts (smoke tests below 224), which the audit takes from a model's
# declared input. Below 64 ResNet's last stage sees 1 x 1 maps and batch norm breaks on one
# image; above 512 an image is mostly upscaled (ImageNet's are about 400 x 350) and the
# audit's inputs (3 x S x S per image) and activations grow past its memory cap.
MIN_CROP, MAX_CROP = 64, 512


def eval_resize(crop: int) -> int:
    """The evaluation resize for a crop: 256 for 224, in proportion for a smoke-test crop."""
    return RESIZE if crop == CROP else round(crop * RESIZE / CROP)
