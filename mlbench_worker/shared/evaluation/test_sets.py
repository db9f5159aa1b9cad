"""Which test set a run is graded on, and its labels, as the evaluator establishes them.

A run's test set is fixed by what the run records: its task (hence the real data set, from
the catalogue), the data set it used (that one or "synthetic"), its seed, how many test
examples it evaluated on (the first N of the set, as the tasks' data code takes them, but
for real ImageNet N spread evenly over its sorted listing, as task 1b's takes them), and
for task 2's generated set its number of features. From that alone the evaluator gets the
labels, in the set's own order: regenerated (generated_labels.py) or read from checksummed
files (file_labels.py). Nothing here asks the run or its training code. Its test inputs,
for the ONNX audit (`inputs`), likewise: regenerated (generated_inputs.py), read from
checksummed files (file_inputs.py), or for task 1b decoded and cropped by the evaluator
itself (imagenet_inputs.py). A translation task's test set has references, not labels
(`references`, text_references.py), and is graded by BLEU (bleu.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlbench_worker.shared import catalogue, imagenet_rules
from mlbench_worker.shared.evaluation import (
    file_inputs,
    file_labels,
    generated_inputs,
    generated_labels,
    imagenet_inputs,
    text_references,
)

SYNTHETIC = "synthetic"
EPSILON_FEATURES = 2000  # task 2's rows (the real set's width, and the generated set's default)
# How each real data set's labels look: a class number below this count, or (None) a sign.
CLASSES: dict[str, int | None] = {"cifar10": 10, "imagenet": 1000, "epsilon": None}
# The real data sets of translation tasks: their test sets are sentences, graded by BLEU.
TEXT_SETS = ("wmt17",)


@dataclass(frozen=True)
class TestSet:
    """The test set a run evaluated on, as the run records it.

    `size` is how many examples the run evaluated on: the first `size` of the set, except
    for real ImageNet, where the worker takes `size` images spread evenly over its sorted
    validation listing (``--test-images``) and the labels are those rows'
    (file_labels.imagenet_subset); `size` equal to the set's length is the whole set."""

    __test__ = False  # not a pytest test class, despite its name

    task: str  # a catalogue name, e.g. "resnet20-cifar10"
    dataset: str  # what the run used: the task's real data set, or "synthetic"
    seed: int
    size: int  # test examples evaluated: the first `size` (real ImageNet: spread evenly)
    data_dir: str = ""  # where the real set's files are (real sets only)
    features: int = EPSILON_FEATURES  # task 2's generated set: features per row

    def describe(self) -> str:
        """How messages name the set."""
        kind = "generated" if self.dataset == SYNTHETIC else self.dataset
        seed = f"seed {self.seed}, " if self.dataset == SYNTHETIC else ""
        return f"the {kind} test set of {self.task} ({seed}first {self.size} examples)"


def task_info(task: str) -> catalogue.TaskInfo:
    """The catalogue entry of a task that has a test set; ValueError naming the problem."""
    try:
        info = catalogue.get(task)
    except catalogue.UnknownTask as exc:
        raise ValueError(str(exc)) from None
    if info.measurement:
        raise ValueError(f"task {task!r} has no test set to grade (it trains no model)")
    if grades_the_model(task):
        metric = info.goals[info.default_goal].metric
        raise ValueError(
            f"the evaluator does not grade task {task!r} from predictions: its {metric} needs "
            "the model run over the validation stream; post the final model (ONNX) to "
            "/api/runs/<id>/model/ and the master grades it"
        )
    return info


def grades_the_model(task: str) -> bool:
    """Whether the evaluator grades `task` from its final model, not predictions: a task
    that trains a model whose data set has no classes to predict (task 3: a language
    model's perplexity)."""
    info = catalogue.TASKS.get(task)
    return (
        info is not None
        and not info.measurement
        and info.dataset not in CLASSES
        and info.dataset not in TEXT_SETS
    )


def is_text(task: str) -> bool:
    """Whether `task` predicts sentences (translation), graded by BLEU from their text."""
    info = catalogue.TASKS.get(task)
    return info is not None and info.dataset in TEXT_SETS


def _checked(test_set: TestSet) -> catalogue.TaskInfo:
    """The task of a test set that exists (its data set is the task's or generated, of at
    least one example); ValueError naming the problem."""
    info = task_info(test_set.task)
    if test_set.dataset not in (info.dataset, SYNTHETIC):
        raise ValueError(
            f"data set {test_set.dataset!r} is not one of {test_set.task}'s: {info.dataset} "
            f"or {SYNTHETIC}"
        )
    if test_set.size < 1:
        raise ValueError(f"a test set of {test_set.size} examples cannot be graded")
    return info


def references(test_set: TestSet) -> list[str]:
    """The references (plain text, in the set's order) of a translation task's `test_set`:
    ValueError for a set that does not exist, LabelsUnavailable when its files are
    missing or damaged."""
    _checked(test_set)
    if not is_text(test_set.task):
        raise ValueError(f"task {test_set.task!r} has labels, not references")
    if test_set.dataset == SYNTHETIC:
        return text_references.generated(test_set.seed, test_set.size)
    found = text_references.newstest2017(test_set.data_dir)
    if test_set.size > len(found):
        raise ValueError(
            f"{test_set.describe()} asks for {test_set.size} sentences; the files hold {len(found)}"
        )
    return found[: test_set.size]


def labels(test_set: TestSet) -> np.ndarray:
    """The labels (int64, in the set's order) of `test_set`: ValueError for a set that does
    not exist, LabelsUnavailable when its files are missing, damaged or not yet readable."""
    family = _checked(test_set).dataset
    if family in TEXT_SETS:
        raise ValueError(f"task {test_set.task!r} has references, not labels")
    if test_set.dataset == SYNTHETIC:
        if family == "cifar10":
            return generated_labels.cifar10(test_set.seed, test_set.size)
        if family == "epsilon":
            return generated_labels.epsilon(test_set.seed, test_set.size, test_set.features)
        return generated_labels.imagenet(test_set.size)
    if family == "cifar10":
        found = file_labels.cifar10(test_set.data_dir)
    elif family == "epsilon":
        found = file_labels.epsilon(test_set.data_dir)
    else:  # from the development kit's archive, not the sorted folders
        found = file_labels.imagenet(test_set.data_dir)
    if test_set.size > found.size:
        raise ValueError(
            f"{test_set.describe()} asks for {test_set.size} examples; the files hold {found.size}"
        )
    if family == "imagenet":
        return file_labels.imagenet_subset(found, test_set.size)
    return found[: test_set.size]


def inputs(test_set: TestSet, rows: np.ndarray, crop: int | None = None) -> np.ndarray:
    """The test inputs at positions `rows` of `test_set`, as the model contract takes them
    (docs/checking.rst, "The model format"): uint8 N x 3 x 32 x 32 images (task 1a), uint8
    N x 3 x `crop` x `crop` images (task 1b: the validation images decoded, resized and
    centre-cropped by the evaluator, imagenet_inputs.py; `crop` defaults to the benchmark's
    224), float32 N x features rows (task 2); regenerated from the seed or read from the
    data set's files. LabelsUnavailable when the files are missing or damaged."""
    family = task_info(test_set.task).dataset
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= test_set.size):
        raise ValueError(f"rows outside {test_set.describe()}")
    if family == "imagenet":
        crop = imagenet_rules.CROP if crop is None else crop
        if not imagenet_rules.MIN_CROP <= crop <= imagenet_rules.MAX_CROP:
            raise ValueError(
                f"a crop of {crop} pixels is not one task 1b's runs take "
                f"({imagenet_rules.MIN_CROP} to {imagenet_rules.MAX_CROP})"
            )
        if test_set.dataset == SYNTHETIC:
            return imagenet_inputs.synthetic(rows, crop)
        return imagenet_inputs.real(test_set.data_dir, test_set.size, rows, crop)
    if test_set.dataset == SYNTHETIC:
        if family == "cifar10":
            return generated_inputs.cifar10(test_set.seed, rows)
        return generated_inputs.epsilon(test_set.seed, rows, test_set.features)
    if family == "cifar10":
        return file_inputs.cifar10(test_set.data_dir, rows)
    return file_inputs.epsilon(test_set.data_dir, rows)
