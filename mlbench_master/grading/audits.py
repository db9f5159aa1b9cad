"""Which audit a run's final model gets, behind one interface (docs/checking.rst, "The ONNX
audit" and "How the master grades it").

Why an interface: the upload view once chose between two modules by a condition, each with
the same functions by convention only. Now each audit is a class that says which tasks it
grades and keeps the contract below; the view asks `for_task` and calls it without knowing
which it got. An audit for a new task is one class added to AUDITS (or `registered` for a
while, as a test does); the first that applies wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlbench_master.api.models import Run
from mlbench_master.grading import model_auditing, perplexity_audit, scoring
from mlbench_worker.shared.evaluation import audit_process, test_sets


class ModelAudit(Protocol):
    """What the master does with a posted model: check the request's parameters before the
    body is read (`check`: SetRefused naming one), then check, store and start grading the
    body (`intake`: ModelRefused or SetRefused before anything is stored; the stored record
    otherwise, "pending" or "not audited" with why), within `limits` (the bounded child
    process's time and memory)."""

    name: str

    def applies_to(self, task: str) -> bool: ...

    def limits(self) -> audit_process.Limits: ...

    def check(self, run: Run, dataset: str, features: int | None, precision: str) -> None: ...

    def intake(
        self,
        run: Run,
        tmp: Path,
        dataset: str,
        features: int | None,
        step: int | None,
        precision: str,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class FunctionAudit:
    """An audit whose steps are a module's functions (the two below)."""

    name: str
    applies: Callable[[str], bool]
    limits: Callable[[], audit_process.Limits]
    check: Callable[[Run, str, int | None, str], None]
    intake: Callable[..., dict[str, Any]]

    def applies_to(self, task: str) -> bool:
        return self.applies(task)


@dataclass(frozen=True)
class NotAudited:
    """Tasks whose models this master does not audit: a posted model is refused before its
    body is read, naming why, so nothing unaudited is stored as if it had been checked.
    (None now: task 4b had it until its audit was built; kept for the next such task.)"""

    name: str
    applies: Callable[[str], bool]
    why: str

    def applies_to(self, task: str) -> bool:
        return self.applies(task)

    def limits(self) -> audit_process.Limits:
        return model_auditing.limits()

    def check(self, run: Run, dataset: str, features: int | None, precision: str) -> None:
        raise scoring.SetRefused("model", f"run {run.pk} ({run.task}): {self.why}")

    def intake(self, run: Run, tmp: Path, *_args: Any) -> dict[str, Any]:
        raise scoring.SetRefused("model", f"run {run.pk} ({run.task}): {self.why}")


AUDITS: list[ModelAudit] = [
    # Task 4b: the final model's greedy decoding, checked in one teacher-forced pass on a
    # sample of the test sentences, must write the hypotheses the run posted
    # (shared/evaluation/translation_audit.py; the intake and the thread are the image
    # tasks', model_auditing.py).
    FunctionAudit(
        "translation",
        test_sets.is_text,
        model_auditing.limits,
        model_auditing.check_parameters,
        model_auditing.intake,
    ),
    # Task 3: the final model's perplexity over the whole validation stream, compared with
    # the run's own.
    FunctionAudit(
        "perplexity",
        test_sets.grades_the_model,
        perplexity_audit.limits,
        perplexity_audit.check_parameters,
        perplexity_audit.intake,
    ),
    # Every other task (the last in line): the model run on a sample of the evaluator's test
    # inputs against the run's stored predictions; a task without a test set is refused by
    # its check, naming why.
    FunctionAudit(
        "predictions",
        lambda task: True,
        model_auditing.limits,
        model_auditing.check_parameters,
        model_auditing.intake,
    ),
]


def for_task(task: str) -> ModelAudit:
    """The audit a model of `task` gets: the first in AUDITS that applies (the last one,
    the predictions audit, takes every task the others leave)."""
    return next(audit for audit in AUDITS if audit.applies_to(task))


@contextmanager
def registered(audit: ModelAudit) -> Iterator[ModelAudit]:
    """`audit` first in AUDITS while the block runs (a plug-in's test, an experiment)."""
    AUDITS.insert(0, audit)
    try:
        yield audit
    finally:
        AUDITS.remove(audit)
