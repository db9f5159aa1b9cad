"""Task 4b's generated stand-in for WMT17: sentence pairs of a fixed English-to-German-shaped
grammar (the recipe and why: mlbench_worker/shared/translation_corpus.py).

The recipe is in the shared room, torch-free, so that the evaluator regenerates a run's
references from the same rule; this module is the task's name for it, with how many pairs
a run generates when it is not told.
"""

from __future__ import annotations

from mlbench_worker.shared.translation_corpus import TEST_SENTENCES, generated_pairs

TRAIN_PAIRS = 100_000  # generated for a run without --train-samples (about 5 s of CPU)

__all__ = ["TEST_SENTENCES", "TRAIN_PAIRS", "generated_pairs"]
