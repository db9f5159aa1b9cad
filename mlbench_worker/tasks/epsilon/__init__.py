"""Task 2's code: generalised linear models trained by synchronous mini-batch SGD.

This package's top level is plain data (no torch), so the option parser can list the models
quickly; the training code lives in its modules: glm.py (the models and their losses),
data.py (each rank's rows: epsilon or synthetic), synthetic.py, train.py (the trainer, built
on training/trainer.py's Trainer) and setup.py (one run's pieces).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GlmRates:
    """How a model's learning rate relates to the task's (glm.py says why for each)."""

    factor: float  # multiplies the task's rate
    max_lr: float | None = None  # stability bound the scaled rate never exceeds (unless --lr)


GLMS: dict[str, GlmRates] = {
    "logistic-regression": GlmRates(1.0),
    "ridge": GlmRates(0.125, max_lr=1.0),
}
