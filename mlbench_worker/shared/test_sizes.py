"""How large each data set's whole test set is: what a run is graded on unless it was
created with a smaller `test_examples` (mlbench_master/run_rules/test_set.py).

Plain data, imported by the master (which fixes a run's test set before it starts and holds
every posted file to it) and by the worker's data code (which generates or reads that many
examples), so that the two can never disagree about what "the whole test set" is. Keyed by
the catalogue's data-set family, then "real" or "synthetic" (the generated stand-in).
Task 3 counts validation tokens, task 4 test sentences, the others examples (images, rows).
"""

from __future__ import annotations

REAL, SYNTHETIC = "real", "synthetic"

WHOLE: dict[str, dict[str, int]] = {
    # CIFAR-10's test batch; the generated set keeps its size.
    "cifar10": {REAL: 10_000, SYNTHETIC: 10_000},
    # ImageNet's validation set; the generated set: 2 images per class.
    "imagenet": {REAL: 50_000, SYNTHETIC: 2_000},
    # epsilon's test file (LIBSVM, 100,000 rows); the generated set keeps its size.
    "epsilon": {REAL: 100_000, SYNTHETIC: 100_000},
    # WikiText-2's validation stream in tokens; the generated stream keeps its length.
    "wikitext2": {REAL: 217_646, SYNTHETIC: 217_646},
    # newstest2017 en-de in sentences; the generated test set: translation_corpus.TEST_SENTENCES.
    "wmt17": {REAL: 3_004, SYNTHETIC: 500},
}


def whole(family: str, dataset: str) -> int:
    """The size of the whole test set of `family` when a run uses `dataset` (the family's
    real set, or "synthetic"); KeyError for a family without a test set."""
    return WHOLE[family][SYNTHETIC if dataset == SYNTHETIC else REAL]


def smallest(family: str) -> int:
    """The smaller of the real and the generated whole set: what a run whose data set is
    decided only when it starts ("auto") is sure to have."""
    return min(WHOLE[family].values())
