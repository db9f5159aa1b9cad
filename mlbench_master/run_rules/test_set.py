"""The test set a run is graded on, fixed when the run is created (docs/checking.rst,
"The test set belongs to the run").

Why here and not in the file: the evaluator once graded "the first as many examples as the
file predicts", so a run could post predictions for the 15 rows its model gets right and be
graded 100 %. Now the size is a field of the run (`test_examples`; null: the task's whole
test set of the data set the run uses, shared/test_sizes.py), decided before anything runs,
recorded in the manifest and the bundle, passed to the worker as ``--test-images`` and
held against every file the run posts (`examples_for`, called by grading.py and the
perplexity audit). A smaller set is allowed, for smoke tests and quick comparisons, and is
shown as such wherever a result is ranked.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue, test_sizes
from mlbench_worker.shared.evaluation import test_sets

FIELD = "test_examples"


def check_test_examples(
    fields: dict[str, Any], info: catalogue.TaskInfo | None, measurement: bool, errors: Errors
) -> None:
    """A test set no larger than the whole one of any data set the run may use; none for a
    measurement (checked with the other training-only fields) or a task without one."""
    n = fields.get(FIELD)
    if n is None or measurement:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        errors.add(FIELD, f"{FIELD} must be a whole number of at least 1, not {n!r}")
        return
    if info is None or info.dataset not in test_sizes.WHOLE:
        return  # an unknown task is refused by name elsewhere
    dataset = fields.get("dataset") or "auto"
    limit = (
        test_sizes.smallest(info.dataset)
        if dataset == "auto"
        else test_sizes.whole(info.dataset, dataset)
    )
    if n > limit:
        which = (
            "the smaller of its real and generated sets (dataset auto)"
            if dataset == "auto"
            else f"its {'generated' if dataset == test_sizes.SYNTHETIC else 'real'} set"
        )
        errors.add(
            FIELD,
            f"task {info.name} has {limit} test {unit(info)} in {which}; {FIELD} must be "
            f"at most that (leave it out for the whole set)",
        )


def unit(info: catalogue.TaskInfo) -> str:
    """What a task's test set counts: tokens for a language model, sentences for a
    translation task, else examples."""
    if info.dataset in test_sets.TEXT_SETS:
        return "sentences"
    return "tokens" if info.dataset == "wikitext2" else "examples"


def examples_for(task: str, test_examples: int | None, dataset: str) -> int:
    """How many test examples a run of `task` created with `test_examples` is graded on
    when it used `dataset` (its real set or "synthetic"): the number it was created with,
    else the whole set's. KeyError for a task without a test set."""
    if test_examples:
        return int(test_examples)
    return test_sizes.whole(catalogue.get(task).dataset, dataset)


def describe(task: str, examples: int, dataset: str) -> str:
    """ "graded on the whole test set (10000 examples)" or "graded on 128 of 10000
    examples": how pages and messages say it."""
    info = catalogue.get(task)
    whole = test_sizes.whole(info.dataset, dataset)
    if examples == whole:
        return f"the whole test set ({whole} {unit(info)})"
    return f"{examples} of {whole} test {unit(info)}"
