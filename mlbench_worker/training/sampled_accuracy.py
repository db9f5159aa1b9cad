"""The training accuracy of a step whose predictions are sub-words or words: counted on one
token in ACCURACY_STRIDE, shared by tasks 3 and 4b.

Why sampled: an arg-max over every token's logits (33,278 for WikiText-2's words, 37,000 for
task 4b's sub-words) cost 1.8 % of a small GPT's step and 1 % of a base Transformer's on a
CPU, more than a loop may cost beside a plain one (issue 49); an eighth of it costs a
quarter of that. The tokens counted start at a position that moves with the step, so every
position takes its turn, and the count is scaled to the step's tokens. A validation
accuracy counts every token.
"""

from __future__ import annotations

import torch

ACCURACY_STRIDE = 8


def right_predictions(logits: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
    """The step's right predictions, estimated from every ACCURACY_STRIDE-th token of `y`
    (logits: one row of the vocabulary per token, in any leading shape)."""
    flat = logits.detach().reshape(-1, logits.shape[-1])
    n = y.shape[0]
    first = step % min(ACCURACY_STRIDE, n)
    picked = flat[first::ACCURACY_STRIDE]
    right = (picked.argmax(-1) == y[first::ACCURACY_STRIDE]).sum()
    return right * (n / picked.shape[0])
