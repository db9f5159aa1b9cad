"""The platform audits a run's final model: the posted ONNX file is checked against the task's
contract, stored, and run by the evaluator (mlbench_worker/shared/evaluation/model_audit.py)
on the test inputs it owns, against the run's stored predictions of the step it names
(docs/checking.rst, "The ONNX audit").

Where the model runs: never in this process. The check at POST and the audit each run in a
child process (shared/evaluation/audit_process.py) in an empty working directory, with its
address space capped at MLBENCH_AUDIT_MEMORY_MIB and killed after MLBENCH_AUDIT_TIMEOUT
seconds: a posted model is a program, and one that loops, allocates without end or reads
files must cost a verdict ("refused: ... over N s"), not the web server.

Why a thread of the web server starts the audit, and not the RQ queue: the runs queue's
workers are busy with runs (a run's job holds one for the run's whole life, and the model
arrives while it still runs), so an audit queued there would wait for the run to end or for
another RQ worker the operator may not have. The thread only waits for its child; one audit
runs at a time per master process (AUDIT_SLOTS), and one that waits longer than the time
limit for its turn says so rather than stay "pending". The request answers 202 "pending" at
once.

What is checked before anything is stored (400 naming the parameter, or `model`): the
step's predictions are stored (the last one when the request names no step); the file is
one self-contained ONNX model that loads, takes the task's inputs (task 1b: N x 3 x S x S
with S fixed in the model, one of the crops a run may use) and gives scores of the task's
shape on three of them. The sample is MLBENCH_AUDIT_SAMPLE rows, or for task 1b, whose
rows cost a ResNet-50 each, MLBENCH_AUDIT_SAMPLE_IMAGENET (`sample_size`). Then, with
the run's row locked (a run deleted meanwhile stores nothing) and under the model folder's
lock (model_files.py), the "pending" record is written first, with a new audit id and the
sample's seed drawn now, after the predictions were fixed; then the model is put in place.
Nothing of the run's grades changes: an audit only adds its result.

A translation run's model (task 4b) takes the same path: its check and audit in the child
are translation_audit.py's (the model's greedy decoding must write the posted hypotheses),
its precision fp32 or tf32, its sample MLBENCH_AUDIT_SAMPLE sentences.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import Http404

from mlbench_master.api.models import Run
from mlbench_master.grading import model_files, prediction_files, scoring
from mlbench_worker.shared.evaluation import (
    audit_process,
    model_audit,
    predictions,
    test_sets,
    translation_audit,
)
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.model_audit import ModelRefused

log = logging.getLogger(__name__)

AUDIT_SLOTS = threading.Semaphore(1)


def limits() -> audit_process.Limits:
    return audit_process.Limits(settings.MLBENCH_AUDIT_TIMEOUT, settings.MLBENCH_AUDIT_MEMORY_MIB)


def check_parameters(run: Run, dataset: str, features: int | None, precision: str) -> None:
    """Refuse, before the body is read, a model the run cannot have: SetRefused naming
    `dataset`, `features` or `precision`."""
    scoring.test_set_of(run, dataset, features)
    text = test_sets.is_text(run.task)  # task 4b: no --amp, so no bf16 or fp16
    allowed = translation_audit.PRECISIONS if text else model_audit.PRECISIONS
    if precision not in allowed:
        raise scoring.SetRefused(
            "precision",
            f"{precision[:20]!r} is not an evaluation precision"
            + (" of a translation run" if text else "")
            + f": {', '.join(allowed)}",
        )


def sample_size(test_set: test_sets.TestSet) -> int:
    """How many rows of `test_set` an audit runs at most (the settings: docs/configuration.rst)."""
    if test_sets.task_info(test_set.task).dataset == "imagenet":
        return settings.MLBENCH_AUDIT_SAMPLE_IMAGENET
    return settings.MLBENCH_AUDIT_SAMPLE


def _predictions_of(run_id: int, step: int | None) -> prediction_files.StoredFile:
    stored = prediction_files.stored(run_id)
    if not stored:
        raise ModelRefused(
            f"run {run_id} has no predictions stored: the model is audited against the run's "
            "predictions of the step it was evaluated at, so post them first"
        )
    if step is None:
        return stored[-1]
    for found in stored:
        if found.step == step:
            return found
    steps = ", ".join(str(f.step) for f in stored[-5:])
    raise scoring.SetRefused(
        "step", f"run {run_id} has no predictions of step {step} stored (the last: {steps})"
    )


def intake(
    run: Run,
    tmp: Path,
    dataset: str,
    features: int | None,
    step: int | None = None,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Check the received model `tmp` of `run`, store it, and start its audit against the
    predictions of `step` (None: the last stored), evaluated in `precision`; the stored
    record ("pending", or "not audited" with why). Refusals raise before anything is
    stored: SetRefused (a parameter), ModelRefused (the model, or no predictions)."""
    check_parameters(run, dataset, features, precision)
    chosen = _predictions_of(run.pk, step)
    submitted = predictions.read(chosen.path)
    test_set = scoring.test_set_of(run, dataset, features, size=scoring.size_of(submitted))
    answer = run_child(audit_process.request_of(test_set, mode="check", model=tmp))
    if "refused" in answer or "not_audited" in answer:
        raise ModelRefused(answer.get("refused") or answer["not_audited"])
    rows = min(test_set.size, sample_size(test_set))
    record: dict[str, Any] = {
        "status": model_audit.PENDING,
        "step": submitted.step,
        "dataset": dataset,
        "precision": precision,
        "since": now(),
        "audit_id": model_files.new_audit_id(),
        "model_sha256": answer["sha256"],
        "model_bytes": tmp.stat().st_size,
        "predictions_sha256": chosen.sha256,
        "examples": rows,
        "sample": rows < test_set.size,
        "sample_seed": model_audit.new_sample_seed(),
    }
    try:  # the same test set as the predictions' grade (cached: it was built then)
        scoring.evaluator_for(test_set).grade(submitted)
    except predictions.PredictionsRefused:
        raise ModelRefused(
            f"the model is posted for {test_set.describe()}, but the run's predictions of "
            f"step {submitted.step} are of another test set: name the data set they were "
            "posted with"
        ) from None
    except LabelsUnavailable as exc:
        record |= {"status": model_audit.NOT_AUDITED, "why": str(exc)}
    target = store(run, tmp, record)
    if record["status"] == model_audit.PENDING:
        start(Audit(target, chosen.path, test_set, record, limits(), verdict=_verdict))
    return record


def store(run: Run, tmp: Path, record: dict[str, Any]) -> Path:
    """Write `record` (its `audits` count set) and put the model `tmp` in place, with the
    run's row locked (Http404 for a run deleted meanwhile: nothing stored) and under the
    model folder's lock; the folder."""
    target = model_files.folder(run.pk)
    with transaction.atomic():
        if not list(Run.objects.select_for_update().filter(pk=run.pk).values_list("pk")):
            raise Http404(f"run {run.pk} was deleted")
        try:
            with model_files.locked(target):
                record["audits"] = int((model_files.read(target) or {}).get("audits", 0)) + 1
                record["grader"] = model_files.grader()  # this process runs its audit
                model_files.write_audit(target, record)
                model_files.publish(tmp, run.pk)
        except model_files.RunGone:
            raise Http404(f"run {run.pk} was deleted") from None
    return target


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def run_child(request: dict[str, Any]) -> dict[str, Any]:
    """The child's answer to a check (the audit's limits); ModelRefused when it failed."""
    try:
        return audit_process.run(request, limits())
    except audit_process.Failed as exc:
        log.error("the check of a posted model failed: %s", exc)
        raise ModelRefused(f"the model could not be checked: {exc}") from None


@dataclass(frozen=True)
class Audit:
    """What one audit is of, all fixed when the model was stored (nothing in the thread
    depends on settings that may change once the request is over): `verdict(job)` runs it
    (this module's, or task 3's in perplexity_audit.py), one at a time per `slots`."""

    folder: Path
    predictions: Path | None
    test_set: Any  # a TestSet, or task 3's record of the run (perplexity_audit.run_record)
    record: dict[str, Any]
    limits: audit_process.Limits
    verdict: Callable[[Audit], dict[str, Any]]
    slots: threading.Semaphore = AUDIT_SLOTS

    @property
    def run_id(self) -> int:
        return int(self.folder.name)


def start(job: Audit) -> None:
    threading.Thread(
        target=_audit, args=(job,), name=f"mlbench-audit-{job.run_id}", daemon=True
    ).start()


def _audit(job: Audit) -> None:
    """The audit itself, in the background: its result replaces "pending" while the stored
    record is still this audit's (a model posted again meanwhile has its own)."""
    record = job.record
    try:
        if not job.slots.acquire(timeout=job.limits.seconds):
            result: dict[str, Any] = {
                "status": model_audit.NOT_AUDITED,
                "why": f"the master was busy auditing other models for over "
                f"{job.limits.seconds:g} s; post the model again",
            }
        else:
            try:
                # The time a "pending" may last counts from here (model_files.audit_of).
                running = record | {"since": now()}
                if not model_files.replace_if_current(job.folder, record["audit_id"], running):
                    return  # superseded by a later model, or the run was deleted
                result = job.verdict(job)
            finally:
                job.slots.release()
        model_files.replace_if_current(job.folder, record["audit_id"], record | result)
    except Exception:  # a thread's error must be said somewhere: the log
        log.exception("the audit of the model in %s failed", job.folder)


def _verdict(job: Audit) -> dict[str, Any]:
    record = job.record
    request = audit_process.request_of(
        job.test_set,
        mode="audit",
        model=job.folder / model_files.MODEL,
        predictions=job.predictions,
        sample=record["examples"],
        sample_seed=record["sample_seed"],
        precision=record["precision"],
    )
    answer = child_answer(job, request)
    return answer if "status" in answer else answer["result"]


def child_answer(job: Audit, request: dict[str, Any]) -> dict[str, Any]:
    """The child's answer to an audit's `request`, or a verdict (a dict with "status") where
    it gave none: refused, not audited, failed, or the stored model changed meanwhile."""
    try:
        answer = audit_process.run(request, job.limits)
    except audit_process.Failed as exc:  # a bug here must not pass for a verdict on the run
        log.error("the audit of the model in %s failed: %s", job.folder, exc)
        return {"status": model_audit.NOT_AUDITED, "why": f"the audit failed: {exc}"}
    if answer.get("sha256", job.record["model_sha256"]) != job.record["model_sha256"]:
        return {
            "status": model_audit.NOT_AUDITED,
            "why": "the stored model changed during its audit; post the model again",
        }
    if "refused" in answer:
        return {"status": model_audit.REFUSED, "why": answer["refused"]}
    if "not_audited" in answer:
        return {"status": model_audit.NOT_AUDITED, "why": answer["not_audited"]}
    return answer
