"""Task 1a: image classification, ResNet on CIFAR-10, synchronous data-parallel SGD.

The schedule follows He et al. 2016 (section 4.2): learning rate 0.1 for batch 128, divided
by 10 at 32k and 48k iterations, stopping at 64k iterations; in epochs of 50,000 images
that is a decay at epochs 82 and 123 and at most 164 epochs. With K workers each keeps a
batch of 128, so the global batch is 128*K and the rate is scaled to 0.1*K after a linear
warm-up of 5 epochs (Goyal et al. 2017), which keeps large-K runs stable. The model, data
set, goals, batch, rate and epochs are the catalogue's (mlbench_worker/shared/catalogue.py).
"""

from __future__ import annotations

from mlbench_worker.shared import catalogue
from mlbench_worker.tasks.base import Task, catalogue_fields


def _task(info: catalogue.TaskInfo) -> Task:
    return Task(
        **catalogue_fields(info),
        momentum=0.9,
        weight_decay=1e-4,
        warmup_epochs=5,
        decay_epochs=(82, 123),
        decay_factor=0.1,
    )


TASKS = [_task(info) for info in catalogue.TASKS.values() if info.dataset == "cifar10"]
