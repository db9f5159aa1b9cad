"""The evaluator: grades a run's predictions against test labels it owns, by the task's metric.

Implementations only predict (docs/checking.rst, "Who grades a run"): this module, not the
code that trained, decides a run's accuracy. It depends on numpy and the standard library
(and scipy for ImageNet's meta.mat) and imports nothing of any implementation, trainer,
model or framework (tests/test_worker_rooms.py enforces it), so a bug or a lie in a
trainer cannot reach the grade. The labels come from test_sets.py (regenerated from the
seed, or read from checksummed files), never from the run.

Metrics, named as the worker posts its own so the two can stand side by side: the task's
goal metric (``val_accuracy``: top-1 for tasks 1a and 1b, the share of correct -1/+1
labels for task 2) and, where the catalogue says the task grades it, ``val_top5_accuracy``.

Anything that is not a prediction of this run's test set is refused with PredictionsRefused
naming the problem (another set's digest, a wrong length or type, NaN, a class outside the
task's, a field the task does not have), never graded as zero. The ONNX audit (running the
run's exported model on the test inputs) will be a second method here, with onnxruntime
as its one further dependency; it is not built yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.shared.evaluation import test_sets
from mlbench_worker.shared.evaluation.predictions import (
    CLASS,
    LABEL,
    PREDICTIONS,
    TOP5,
    Predictions,
    PredictionsRefused,
    digest_of,
    read,
)

TOP5_METRIC = "val_top5_accuracy"


@dataclass(frozen=True)
class Grade:
    """The evaluator's grade of one evaluation of a run."""

    step: int
    epoch: float
    elapsed: float
    examples: int
    metrics: dict[str, float]  # metric name -> value (accuracies in 0..1, BLEU in 0..100)
    signature: str = ""  # how the metric was computed, where it has variants (sacrebleu's)


class Evaluator:
    """Grades predictions of one test set for one task. Built once per run (the labels are
    read or regenerated once), then asked for each evaluation's file."""

    def __init__(self, task: str, labels: np.ndarray, described: str = "the run's test set"):
        info = test_sets.task_info(task)
        self.task = task
        self.classes = test_sets.CLASSES[info.dataset]  # None: -1/+1 labels (task 2)
        self.top5 = info.top5
        self.metric = info.goals[info.default_goal].metric
        self.labels = np.ascontiguousarray(labels, dtype=np.int64)
        if self.labels.ndim != 1 or not self.labels.size:
            raise ValueError(f"labels must be a non-empty list, got shape {self.labels.shape}")
        self.digest = digest_of(self.labels)
        self.described = described

    @classmethod
    def of(cls, test_set: test_sets.TestSet) -> Evaluator:
        """The evaluator of a run's test set (labels from test_sets.labels)."""
        return cls(test_set.task, test_sets.labels(test_set), test_set.describe())

    def expected_fields(self) -> tuple[str, ...]:
        """The prediction arrays a file for this task must hold."""
        if self.classes is None:
            return (LABEL,)
        return (CLASS, TOP5) if self.top5 else (CLASS,)

    def grade(self, predictions: Predictions | str | Path) -> Grade:
        """The grade of one evaluation (a file's path, or what `read` gave)."""
        p = predictions if isinstance(predictions, Predictions) else read(predictions)
        where = p.source or "the predictions"
        refuse_other_set(where, p.test_set_digest, self.digest, self.described)
        refuse_other_fields(where, self.task, p, self.expected_fields())
        n = self.labels.size
        if self.classes is None:
            label = _integers(where, LABEL, p.arrays[LABEL], (n,))
            bad = np.flatnonzero((label != 1) & (label != -1))
            if bad.size:
                raise PredictionsRefused(
                    f"{where}: {LABEL} row {bad[0]} is {label[bad[0]]}; labels are -1 or +1"
                )
            metrics = {self.metric: float(np.mean(label == self.labels))}
        else:
            top1 = self._classes(where, CLASS, p.arrays[CLASS], (n,))
            metrics = {self.metric: float(np.mean(top1 == self.labels))}
            if self.top5:
                metrics[TOP5_METRIC] = self._top5(where, p.arrays[TOP5], top1)
        return Grade(p.step, p.epoch, p.elapsed, n, metrics)

    def _classes(self, where: str, name: str, array: np.ndarray, shape: tuple) -> np.ndarray:
        values = _integers(where, name, array, shape)
        assert self.classes is not None
        bad = np.flatnonzero((values < 0) | (values >= self.classes))
        if bad.size:
            row = np.unravel_index(bad[0], values.shape)[0]
            raise PredictionsRefused(
                f"{where}: {name} row {row} holds {values.flat[bad[0]]}; the classes of "
                f"{self.task} are 0..{self.classes - 1}"
            )
        return values.astype(np.int64)

    def _top5(self, where: str, array: np.ndarray, top1: np.ndarray) -> float:
        top5 = self._classes(where, TOP5, array, (self.labels.size, 5))
        differs = np.flatnonzero(top5[:, 0] != top1)
        if differs.size:
            raise PredictionsRefused(
                f"{where}: {TOP5} row {differs[0]} starts with {top5[differs[0], 0]}, not "
                f"the predicted class {top1[differs[0]]} (best first)"
            )
        ordered = np.sort(top5, axis=1)
        repeats = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if repeats.size:
            raise PredictionsRefused(
                f"{where}: {TOP5} row {repeats[0]} names a class twice "
                f"({top5[repeats[0]].tolist()}); five different classes, please"
            )
        return float(np.mean((top5 == self.labels[:, None]).any(axis=1)))


def refuse_other_set(where: str, found: str, digest: str, described: str) -> None:
    """PredictionsRefused when a file's test set digest is not the run's set's."""
    if found != digest:
        raise PredictionsRefused(
            f"{where}: predictions for another test set (digest {found[:16]}...); this run's "
            f"is {described}, digest {digest[:16]}... (the same set in another order, or cut "
            "to another size, has another digest too)"
        )


def refuse_other_fields(where: str, task: str, p: Predictions, wanted: tuple[str, ...]) -> None:
    """PredictionsRefused when a file lacks a field `task` takes or holds one it does not."""
    missing = [n for n in wanted if n not in p.arrays]
    extra = [n for n in PREDICTIONS if n in p.arrays and n not in wanted]
    if missing or extra:
        raise PredictionsRefused(
            f"{where}: task {task} takes {' and '.join(wanted)}"
            + (f"; {', '.join(missing)} missing" if missing else "")
            + (f"; {', '.join(extra)} not expected" if extra else "")
        )


def _integers(where: str, name: str, array: np.ndarray, shape: tuple) -> np.ndarray:
    """`array` if it is integers of `shape`; PredictionsRefused naming the problem if not."""
    if array.dtype.kind == "f" and array.size and np.isnan(array).any():
        row = np.unravel_index(int(np.flatnonzero(np.isnan(array))[0]), array.shape)[0]
        raise PredictionsRefused(
            f"{where}: {name} holds NaN (first at row {row}); predictions are integers"
        )
    if array.dtype.kind not in "iu":
        raise PredictionsRefused(
            f"{where}: {name} is {array.dtype}; it must hold integers (e.g. int64)"
        )
    if array.shape != shape:
        if len(shape) == 1 and array.ndim == 1:
            found = f"has {array.shape[0]} entries"
        else:
            found = f"is {' x '.join(map(str, array.shape)) or 'a single value'}"
        wanted = "" if len(shape) == 1 else f", so it must be {shape[0]} x {shape[1]}"
        raise PredictionsRefused(
            f"{where}: {name} {found}; the test set has {shape[0]} examples{wanted}"
        )
    return array
