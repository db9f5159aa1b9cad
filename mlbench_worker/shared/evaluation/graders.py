"""Which evaluator grades a test set: the one place that chooses, for the master's
grading, `mlbench evaluate` and the re-grade of an imported run alike.

A translation task's hypotheses are scored by BLEU (bleu.py); every other task's
predictions by its labels (evaluator.py). Both answer `grade(file) -> Grade` and hold the
set's `digest`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlbench_worker.shared.evaluation import test_sets
from mlbench_worker.shared.evaluation.evaluator import Evaluator

if TYPE_CHECKING:
    from mlbench_worker.shared.evaluation.bleu import BleuEvaluator


def evaluator_of(test_set: test_sets.TestSet) -> Evaluator | BleuEvaluator:
    """The evaluator of `test_set`; LabelsUnavailable or ValueError as building it raises."""
    if test_sets.is_text(test_set.task):
        # Imported here: sacrebleu is needed only for translation, and `mlbench evaluate`
        # grades the other tasks where the client has numpy but not sacrebleu.
        from mlbench_worker.shared.evaluation.bleu import BleuEvaluator

        return BleuEvaluator.of(test_set)
    return Evaluator.of(test_set)
