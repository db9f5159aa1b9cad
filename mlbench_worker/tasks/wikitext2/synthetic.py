"""Task 3's generated stand-in for WikiText-2: a walk of a fixed random Markov chain with a
known best perplexity (the recipe and why: mlbench_worker/shared/wikitext2_synthetic.py).

The recipe is in the shared room, numpy only, so that the evaluator regenerates a run's
validation stream from the same rule (shared/evaluation/token_streams.py); this module is
the task's name for it.
"""

from __future__ import annotations

from mlbench_worker.shared.wikitext2_synthetic import (
    BEST_PERPLEXITY,
    LENGTHS,
    NEXT,
    SUCCESSORS,
    VOCAB,
    WALKERS,
    ZIPF,
    chain,
    stream,
    words,
)

__all__ = [
    "BEST_PERPLEXITY", "LENGTHS", "NEXT", "SUCCESSORS", "VOCAB", "WALKERS", "ZIPF", "chain",
    "stream", "words",
]  # fmt: skip
