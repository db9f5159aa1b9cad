"""The platform audits a run's final model: the posted ONNX file is checked against the task's
contract, stored, and run by the evaluator (mlbench_worker/shared/evaluation/model_audit.py)
on the test inputs it owns, against the run's last stored predictions (docs/checking.rst,
"The ONNX audit").

Why a thread of the web server and not the RQ queue: the runs queue's workers are busy
with runs (a run's job holds one for the run's whole life, and the model arrives while it
still runs), so an audit queued there would wait for the run to end or for another RQ
worker the operator may not have. An audit is CPU work of seconds to tens of seconds
(ResNet-20 on 2,000 images), done in one background thread per master process at a time
(AUDIT_SLOTS), with onnxruntime on THREADS threads: the request answers 202 "pending" at
once. A master restarted during an audit leaves it "pending" with the time it began; posting
the model again (or `mlbench evaluate RUN`) audits it anew.

What is checked before anything is stored (ModelRefused, 400 naming `model`): the file loads
in onnxruntime, takes the task's inputs and gives scores of the task's shape on three of them;
the run has a stored predictions file to compare with (the last one). Nothing of the run's
grades changes: an audit only adds its result (model_files.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from mlbench_master import grading, model_files, prediction_files
from mlbench_master.api.models import Run
from mlbench_worker.shared.evaluation import model_audit, predictions, test_sets
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.model_audit import Model, ModelRefused

log = logging.getLogger(__name__)

AUDIT_SLOTS = threading.Semaphore(1)


def _last_predictions(run_id: int) -> predictions.Predictions:
    stored = prediction_files.stored(run_id)
    if not stored:
        raise ModelRefused(
            f"run {run_id} has no predictions stored: the model is audited against the run's "
            "last predictions file, so post them first"
        )
    return predictions.read(stored[-1].path)


def intake(run: Run, tmp: Path, dataset: str, features: int | None) -> dict[str, Any]:
    """Check the received model `tmp` of `run`, store it, and start its audit; the stored
    result ("pending", or "not audited" with why). Refusals raise before anything is stored:
    SetRefused (a parameter), ModelRefused (the model, or no predictions to compare with)."""
    last = _last_predictions(run.pk)
    size = grading.size_of(last)
    test_set = grading.test_set_of(run, dataset, features, size=size)
    data = tmp.read_bytes()
    record: dict[str, Any] = {
        "step": last.step,
        "dataset": dataset,
        "since": dt.datetime.now(dt.UTC).isoformat(),
    }
    try:
        contract = model_audit.contract_of(test_set)
    except test_sets.NotAudited as exc:
        contract = None
        record |= {"status": model_audit.NOT_AUDITED, "why": str(exc)}
    if contract is not None:
        Model(data, contract)  # ModelRefused: nothing stored
        record["status"] = model_audit.PENDING
        try:  # the same test set as the last predictions' grade (cached: it was built then)
            grading.evaluator_for(test_set).grade(last)
        except predictions.PredictionsRefused:
            raise ModelRefused(
                f"the model is posted for {test_set.describe()}, but the run's last "
                f"predictions (step {last.step}) are of another test set: name the data set "
                "they were posted with"
            ) from None
        except LabelsUnavailable as exc:
            contract = None
            record |= {"status": model_audit.NOT_AUDITED, "why": str(exc)}
    folder = model_files.folder(run.pk)
    folder.mkdir(parents=True, exist_ok=True)
    sha = model_files.sha256_of(tmp)
    record |= {"model_sha256": sha, "model_bytes": len(data)}
    model_files.publish(tmp, run.pk)
    model_files.write_audit(folder, record)
    if contract is not None:
        # Everything the audit needs is fixed now (the model, the predictions it is compared
        # with, the folder and the sample), so nothing in the thread depends on settings
        # that may change once this request is over.
        sample = settings.MLBENCH_AUDIT_SAMPLE
        threading.Thread(
            target=_audit,
            args=(folder, data, last, Audit(sha, contract, test_set, sample, record)),
            name=f"mlbench-audit-{run.pk}",
            daemon=True,
        ).start()
    return record


@dataclass(frozen=True)
class Audit:
    """What one audit is of: the model's digest, its contract, the test set and sample."""

    sha: str
    contract: model_audit.Contract
    test_set: test_sets.TestSet
    sample: int
    record: dict[str, Any]


def _audit(folder: Path, data: bytes, last: predictions.Predictions, job: Audit) -> None:
    """The audit itself, in the background; its result replaces "pending" (only while the
    stored model is still this one: a model posted again meanwhile has its own audit)."""
    with AUDIT_SLOTS:
        try:
            result = model_audit.audit(
                Model(data, job.contract), job.test_set, last, sample=job.sample
            )
        except ModelRefused as exc:
            result = {"status": model_audit.REFUSED, "why": str(exc)}
        except (LabelsUnavailable, predictions.PredictionsRefused, ValueError) as exc:
            result = {"status": model_audit.NOT_AUDITED, "why": str(exc)}
        except Exception as exc:  # a bug here must not pass for a verdict on the run
            log.exception("the audit of the model in %s failed", folder)
            result = {"status": model_audit.NOT_AUDITED, "why": f"the audit failed: {exc}"}
    record = job.record
    base = {k: record[k] for k in ("dataset", "model_sha256", "model_bytes", "step")}
    model_files.write_audit(folder, base | result, model_sha256=job.sha)
