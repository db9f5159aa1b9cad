"""Task 3's model audit: the evaluator grades a language model's final model itself, over
the validation stream it owns, and the master compares that perplexity with the one the run
reported at the same evaluation (docs/checking.rst, "Task 3: perplexity from the model").

Why the model and not predictions: a perplexity is a property of the model's scores over
every position of the stream; a file of per-token probabilities would be the run's word
again. So a task-3 run posts no predictions; its worker posts the final model (ONNX, the
contract of shared/evaluation/language_model.py) to /api/runs/<id>/model/ after its summary,
naming the step of its last evaluation, and this module takes it where model_auditing.py
takes an image model.

What is graded: the run's evaluation repeated position for position (perplexity.grade), from
what the run recorded in its summary (the number of workers, `valid_tokens`, `vocab`, the
geometry) and its seed; the stream is regenerated (the stand-in) or read from WikiText-2's
checksummed archive under MLBENCH_DATA_DIR, never taken from the run. The whole stream, as
the run evaluated it: a subset would give a mean that is not the run's number, so nothing
could be compared. The look-ahead probe's seed is drawn here when the model is stored.

The verdict (the audit record's status): "matches" when the evaluator's mean cross-entropy
and the one the run's reported `val_perplexity` of that step implies differ by at most
TOLERANCE[precision] of it, "mismatch" beyond, "refused" (the model is off the contract or
looks ahead), "not audited" (the stream cannot be had, or the run reported nothing at that
step). The grade itself is kept in the record either way (`graded`).

Cost and limits: one onnxruntime thread scores 300 to 700 tokens a second on this project's
machines, so WikiText-2's 217,646 validation tokens take 5 to 22 minutes: the grade runs in
the same bounded child process as the audit (audit_process.py), under its own time limit
MLBENCH_PERPLEXITY_TIMEOUT (default an hour) and its own slot, so a long grade does not
hold up image models' audits. Only the final model is graded: a model per evaluation would
cost the run an export (134 MB for the AWD-LSTM) and the master a grade each time. So a
task-3 run's time to target stays the run's own word; its last evaluation is what the
evaluator confirms or contradicts.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from mlbench_master.api.models import Run
from mlbench_master.grading import model_auditing, model_files, scoring
from mlbench_master.results import stored
from mlbench_master.run_rules.test_set import examples_for
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import audit_process, model_audit, perplexity
from mlbench_worker.shared.evaluation.model_audit import ModelRefused

REPORTED = "val_perplexity"
KIND = "perplexity"
# How far the evaluator's mean cross-entropy may be from the run's, as a share of it. fp32:
# the two sum the same float32 terms in another order; 1e-7 measured, 1e-5 allowed
# (tests/evaluation/test_perplexity.py). tf32, a GPU run's evaluation with TF32 matrix
# products (torch_export.precision_of): not measured here (no GPU), a provisional bound
# (docs/checking.rst says so). Task 3 offers no --amp, so fp16 and bf16 are refused: a
# wider tolerance that no run can need would only let a claim pass.
TOLERANCE = {"fp32": 1e-5, "tf32": 1e-3}

SLOTS = threading.Semaphore(1)  # one grade at a time per master process, beside the audits


def limits() -> audit_process.Limits:
    return audit_process.Limits(
        settings.MLBENCH_PERPLEXITY_TIMEOUT,
        settings.MLBENCH_AUDIT_MEMORY_MIB,
        "MLBENCH_PERPLEXITY_TIMEOUT",
        # Over it, the machine's speed is as much to blame as the model: not audited.
        over_time="the grade did not end in time; raise the setting and post the model again",
    )


def check_parameters(run: Run, dataset: str, features: int | None, precision: str) -> None:
    """Refuse, before the body is read, what a task-3 model cannot have: SetRefused naming
    `dataset`, `features` or `precision`."""
    scoring.check_dataset(run, catalogue.get(run.task).dataset, dataset, features)
    if precision not in TOLERANCE:
        raise scoring.SetRefused(
            "precision",
            f"{precision[:20]!r} is not a precision of {run.task}'s evaluation: fp32, or tf32 "
            "on a GPU (the task offers no --amp)",
        )


def run_record(run: Run, dataset: str) -> dict[str, Any]:
    """What perplexity.grade needs of `run`, from its summary; ModelRefused when the run has
    not posted one that records it (the model is graded against the run's own record)."""
    summary = run.summary if isinstance(run.summary, dict) else {}
    found = perplexity.run_record(
        run.task, summary, int(run.seed), run.num_workers, dataset, str(settings.MLBENCH_DATA_DIR)
    )
    if found is None:
        raise ModelRefused(
            f"run {run.pk} has no summary recording its evaluation "
            f"({', '.join(perplexity.RECORDED)} and its geometry): a language model is graded "
            "by repeating the run's evaluation, so post the summary first"
        )
    # The validation stream is the run's, fixed when it was created (run_rules/test_set.py),
    # never what its summary says it evaluated on.
    expected = examples_for(run.task, run.test_examples, dataset)
    if int(found["config"]["valid_tokens"]) != expected:
        raise ModelRefused(
            f"run {run.pk} evaluated on {found['config']['valid_tokens']} validation tokens "
            f"(its summary); it is graded on exactly {expected} (its test_examples, else the "
            "whole stream)"
        )
    return found


def _reported_at(run: Run, step: int | None) -> tuple[int, float]:
    """The step the model is graded at (the last reported when `step` is None) and the
    run's own perplexity there. The worker's points reach the master before its model
    (metric_sink.HttpReporter sends its queue before any file), so a step without one is
    refused: ModelRefused without any, SetRefused naming `step` otherwise."""
    points = stored.graded_run(run, {}).points.get(REPORTED, [])
    steps = {meta["step"]: float(v) for v, meta in points if isinstance(meta.get("step"), int)}
    if not steps:
        raise ModelRefused(
            f"run {run.pk} has reported no {REPORTED} yet: the model is graded against the "
            "evaluation it made, so post the run's metrics first"
        )
    if step is None:
        step = max(steps)
    if step not in steps:
        last = ", ".join(str(s) for s in sorted(steps)[-5:])
        raise scoring.SetRefused(
            "step", f"run {run.pk} reported no {REPORTED} at step {step} (the last: {last})"
        )
    return step, steps[step]


def _check_device(run: Run, precision: str) -> None:
    device = str(run.summary.get("device", "")) if isinstance(run.summary, dict) else ""
    if precision == "tf32" and not device.startswith("cuda"):
        raise scoring.SetRefused(
            "precision",
            f"tf32 is a GPU's arithmetic, and run {run.pk} ran on {device or 'no device it named'}",
        )


def intake(
    run: Run,
    tmp: Path,
    dataset: str,
    features: int | None,
    step: int | None = None,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Check the received model `tmp` of task-3 `run` (it loads and keeps its family's
    contract for the run's vocabulary), store it, and start its grade; the stored record
    ("pending"). Refusals raise before anything is stored: SetRefused, ModelRefused."""
    check_parameters(run, dataset, features, precision)
    record_of_run = run_record(run, dataset)
    _check_device(run, precision)
    chosen, said = _reported_at(run, step)
    answer = model_auditing.run_child(
        audit_process.request_of(None, mode="check", model=tmp, run=record_of_run)
    )
    if "refused" in answer or "not_audited" in answer:
        raise ModelRefused(answer.get("refused") or answer["not_audited"])
    record: dict[str, Any] = {
        "status": model_audit.PENDING,
        "kind": KIND,
        "step": chosen,
        "dataset": dataset,
        "precision": precision,
        "tolerance": TOLERANCE[precision],
        "since": model_auditing.now(),
        "time_limit_s": settings.MLBENCH_PERPLEXITY_TIMEOUT,
        "audit_id": model_files.new_audit_id(),
        "model_sha256": answer["sha256"],
        "model_bytes": tmp.stat().st_size,
        "probe_seed": model_audit.new_sample_seed(),
        "reported_perplexity": said,
    }
    target = model_auditing.store(run, tmp, record)
    model_auditing.start(
        model_auditing.Audit(
            target, None, record_of_run, record, limits(), verdict=_verdict, slots=SLOTS
        )
    )
    return record


def _verdict(job: model_auditing.Audit) -> dict[str, Any]:
    record = job.record
    request = audit_process.request_of(
        None,
        mode="audit",
        model=job.folder / model_files.MODEL,
        run=job.test_set,
        probe_seed=record["probe_seed"],
    )
    answer = model_auditing.child_answer(job, request)
    if "score" in answer:
        return compare(answer["score"], record["reported_perplexity"], record)
    return answer  # a verdict already: refused or not audited, with why


def compare(score: dict[str, Any], said: float | None, record: dict[str, Any]) -> dict[str, Any]:
    """The verdict on the evaluator's `score` against the run's reported perplexity `said`
    of the record's step: the status and both numbers."""
    # JSON has no infinity: a mean loss past 700 nats (a diverged model) is a perplexity of
    # none, and a mismatch with any finite claim.
    graded = {
        k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in score.items()
    }
    finite = said is not None and math.isfinite(said) and said > 0
    out: dict[str, Any] = {"graded": graded, "reported_perplexity": said if finite else None}
    if not finite:
        return out | {
            "status": model_audit.NOT_AUDITED,
            "why": f"the run reported no finite {REPORTED} at step {record['step']} to "
            "compare with",
        }
    difference = perplexity.relative_difference(score["loss"], said)
    status = model_audit.MATCHES if difference <= record["tolerance"] else model_audit.MISMATCH
    return out | {"status": status, "difference": difference}
