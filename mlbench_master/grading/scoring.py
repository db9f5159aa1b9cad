"""The platform grades: a run's posted predictions go to the evaluator, and its grade is
stored as the run's ``evaluated_<metric>`` points (docs/checking.rst, "Who grades a run").

The evaluator (mlbench_worker/shared/evaluation/) runs here, in the master, never in the
run's own processes, so nothing the run executes can touch a grade. The test set is fixed
by the run's row (task, seed, and its `test_examples`, decided when the run was created:
run_rules/test_set.py) and the data set the run names; a file predicting another number
of examples is refused, never graded on the part it chose. The evaluator then owns the labels (regenerated, or read from checksummed files under
MLBENCH_DATA_DIR). Building it can be slow (epsilon's real labels are decompressed from
their .bz2 file), so each test set's evaluator is built once and kept in a small LRU;
a set whose labels cannot be had is remembered for a minute, so a run posting every epoch
does not check the same missing files again each time.

A file is graded BEFORE anything is stored: refused predictions leave the run's files and
grades as they were. A graded file and its grade rows are stored in one transaction, under
a lock on the run's row. A step's file is write-once and nothing is graded after the run
ended (frozen.py): the same bytes again (a retry) get the grade without storing anything,
other bytes or a post after the end a 409.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from mlbench_master.api.models import Run
from mlbench_master.grading import prediction_files
from mlbench_master.run_rules.test_set import examples_for
from mlbench_master.runs import frozen, metrics_store
from mlbench_worker.shared.evaluation import graded_name, predictions, test_sets
from mlbench_worker.shared.evaluation.bleu import BleuEvaluator
from mlbench_worker.shared.evaluation.evaluator import TOP5_METRIC, Evaluator, Grade
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.graders import evaluator_of

CACHE_SIZE = 8
UNAVAILABLE_SECONDS = 60.0
MAX_FEATURES = 100_000  # task 2's generated set: the label draw holds features x 32 numbers
MAX_EXAMPLES = 1_000_000  # more than any task's test set (epsilon's has 100,000)
POSTED = "the posted file"


class SetRefused(ValueError):
    """A query parameter naming a test set the run cannot have (`field` says which)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True)
class Intake:
    """What became of one posted file: its grade, or why it could not be graded (kept)."""

    step: int
    dataset: str
    grade: Grade | None
    why: str = ""
    replayed: bool = False  # the same file was already stored: nothing new was stored


def check_dataset(run: Run, family: str, dataset: str, features: int | None) -> None:
    """SetRefused where a file posted for `run` names a data set other than its task's real
    one (`family`) or the generated one, or than the run reported using, or `features`
    for a set that has no such number (only task 2's)."""
    allowed = (family, test_sets.SYNTHETIC)
    if dataset not in allowed:
        raise SetRefused(
            "dataset",
            f"{dataset[:40]!r} is not a data set of {run.task}: {' or '.join(allowed)}",
        )
    if run.dataset_used and run.dataset_used != dataset:
        raise SetRefused(
            "dataset", f"run {run.pk} reported that it used {run.dataset_used}, not {dataset}"
        )
    if features is not None and family != "epsilon":
        raise SetRefused(
            "features", f"only task 2's generated set has a number of features, not {run.task}'s"
        )


def test_set_of(run: Run, dataset: str, features: int | None, size: int = 1) -> test_sets.TestSet:
    """The test set a run's predictions are graded on; SetRefused naming the parameter
    (`dataset`, `features`) when the run's task has no such set."""
    try:
        info = test_sets.task_info(run.task)
    except ValueError as exc:
        raise SetRefused("predictions", f"run {run.pk}: {exc}") from None
    check_dataset(run, info.dataset, dataset, features)
    if features is not None and not 1 <= features <= MAX_FEATURES:
        raise SetRefused("features", f"{features} is not between 1 and {MAX_FEATURES}")
    if features is None or dataset != test_sets.SYNTHETIC:
        features = test_sets.EPSILON_FEATURES  # the real set's width is its own
    return test_sets.TestSet(
        task=run.task,
        dataset=dataset,
        seed=int(run.seed),
        size=size,
        data_dir=str(settings.MLBENCH_DATA_DIR) if dataset != test_sets.SYNTHETIC else "",
        features=features,
    )


_CACHE: OrderedDict[
    test_sets.TestSet, Evaluator | BleuEvaluator | tuple[LabelsUnavailable, float]
] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_BUILDING: dict[test_sets.TestSet, threading.Lock] = {}


def evaluator_for(test_set: test_sets.TestSet) -> Evaluator | BleuEvaluator:
    """The evaluator of `test_set`, built once (two requests for the same set wait for one
    build); LabelsUnavailable or ValueError as `graders.evaluator_of` raises them."""
    with _CACHE_LOCK:
        building = _BUILDING.setdefault(test_set, threading.Lock())
    with building:
        with _CACHE_LOCK:
            known = _CACHE.get(test_set)
            if isinstance(known, tuple) and time.monotonic() - known[1] > UNAVAILABLE_SECONDS:
                known = None
            if known is not None:
                _CACHE.move_to_end(test_set)
        if known is None:
            try:
                known = evaluator_of(test_set)
            except LabelsUnavailable as exc:
                known = (exc, time.monotonic())
            finally:
                with _CACHE_LOCK:
                    _BUILDING.pop(test_set, None)
            with _CACHE_LOCK:
                _CACHE[test_set] = known
                while len(_CACHE) > CACHE_SIZE:
                    _CACHE.popitem(last=False)
    if isinstance(known, tuple):
        raise known[0]
    return known


def forget_evaluators() -> None:
    """Empty the cache (tests; an operator who replaced a data set's files)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _read(tmp: Path) -> predictions.Predictions:
    try:
        read = predictions.read(tmp)
    except predictions.PredictionsRefused as exc:
        raise predictions.PredictionsRefused(str(exc).replace(str(tmp), POSTED)) from None
    except MemoryError:  # a header declaring arrays far larger than the file
        raise predictions.PredictionsRefused(
            f"{POSTED} declares arrays too large to read"
        ) from None
    return dataclasses.replace(read, source=POSTED)


def size_of(p: predictions.Predictions) -> int:
    """How many examples the file predicts (held to the run's test set by `graded_size`):
    a text file's lines, another's entries."""
    if p.text is not None:
        if len(p.text) > MAX_EXAMPLES:
            raise predictions.PredictionsRefused(
                f"{POSTED}: {predictions.TEXT} has {len(p.text)} lines; a test set is graded "
                f"on 1 to {MAX_EXAMPLES} sentences"
            )
        return len(p.text)
    for name in predictions.PREDICTIONS:
        array = p.arrays.get(name)
        if array is not None and array.ndim >= 1:
            if not 1 <= len(array) <= MAX_EXAMPLES:
                raise predictions.PredictionsRefused(
                    f"{POSTED}: {name} has {len(array)} entries; a test set is graded on "
                    f"1 to {MAX_EXAMPLES} examples"
                )
            return len(array)
    raise predictions.PredictionsRefused(
        f"{POSTED} holds no list of predictions ({', '.join(predictions.PREDICTIONS)})"
    )


def graded_size(run: Run, p: predictions.Predictions, dataset: str) -> int:
    """The number of examples `run` is graded on when it used `dataset`; PredictionsRefused
    naming both counts when the file predicts another number (the run does not choose
    its test set by what it posts)."""
    expected = examples_for(run.task, run.test_examples, dataset)
    found = size_of(p)
    if found != expected:
        how = (
            f"it was created with test_examples={run.test_examples}"
            if run.test_examples
            else f"the whole test set of {dataset}; create a run with test_examples to be "
            "graded on fewer"
        )
        raise predictions.PredictionsRefused(
            f"{POSTED} predicts {found} examples; run {run.pk} is graded on exactly "
            f"{expected} ({how})"
        )
    return expected


def graded_names(task: str) -> tuple[str, ...]:
    """Every name a grade of `task` may be stored under."""
    info = test_sets.task_info(task)
    metrics = {goal.metric for goal in info.goals.values()} | {TOP5_METRIC}
    return tuple(sorted(graded_name(m) for m in metrics))


def grade_file(run: Run, file: Path, dataset: str, features: int | None) -> Grade:
    """The grade of a stored file, storing nothing: an imported run's predictions graded
    again by this master (bundles/regrade.py). LabelsUnavailable where this master lacks
    the test set's labels; PredictionsRefused or SetRefused as `intake` raises them."""
    p = _read(file)
    test_set = test_set_of(run, dataset, features, size=graded_size(run, p, dataset))
    try:
        return evaluator_for(test_set).grade(p)
    except (predictions.PredictionsRefused, LabelsUnavailable):
        raise
    except ValueError as exc:  # the real set holds fewer examples than predicted
        raise predictions.PredictionsRefused(f"{POSTED}: {exc}") from None


def intake(run: Run, tmp: Path, dataset: str, features: int | None) -> Intake:
    """Grade the received file `tmp` of `run`, then store it with its grade (or, when the
    labels cannot be had here, store it ungraded for a later `mlbench evaluate`).

    Refusals raise before anything is stored: SetRefused (a parameter),
    PredictionsRefused (the file: not a .npz, another test set, another number of examples
    than the run's, a wrong type, NaN, classes out of range, fields the task lacks), with
    the evaluator's message; frozen.Frozen (a step already stored with other bytes, or the
    run has ended).
    """
    p = _read(tmp)
    if frozen.ended(run):  # nothing new after the end: refused before any grading work
        _write_once(run, tmp, p.step)
    test_set = test_set_of(run, dataset, features, size=graded_size(run, p, dataset))
    try:
        grade: Grade | None = evaluator_for(test_set).grade(p)
        why = ""
    except LabelsUnavailable as exc:
        grade, why = None, str(exc)
    except predictions.PredictionsRefused:
        raise
    except ValueError as exc:  # the real set holds fewer examples than predicted
        raise predictions.PredictionsRefused(f"{POSTED}: {exc}") from None
    rows = []
    if grade is not None:
        meta = {
            "step": grade.step,
            "epoch": grade.epoch,
            "elapsed": grade.elapsed,
            "examples": grade.examples,
            "dataset": dataset,
        }
        if dataset == test_sets.SYNTHETIC and test_sets.task_info(run.task).dataset == "epsilon":
            meta["features"] = test_set.features  # its labels depend on it: kept to regrade
        if grade.signature:  # which BLEU (sacrebleu's signature), shown beside the grade
            meta["signature"] = grade.signature
        now = timezone.now()
        rows = [
            metrics_store.Point(run.pk, None, graded_name(name), value, now, False, meta, None)
            for name, value in grade.metrics.items()
        ]
    replaced = metrics_store.Replaced(run.pk, graded_names(run.task), "step", p.step)
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None:
            raise Http404(f"run {run.pk} was deleted")
        if _write_once(locked, tmp, p.step):
            return Intake(p.step, dataset, grade, why, replayed=True)
        metrics_store.store(rows, replaces=replaced)
        prediction_files.publish(tmp, run.pk, p.step)
    return Intake(p.step, dataset, grade, why)


def _write_once(run: Run, tmp: Path, step: int) -> bool:
    """frozen.write_once for `step`'s file: True for a retry of the stored bytes."""
    stored = prediction_files.path(run.pk, step)
    return frozen.write_once(run, stored, tmp, f"predictions of step {step}")
