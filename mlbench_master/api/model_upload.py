"""/api/runs/<id>/model/: a run hands its final model (ONNX) to the platform's audit, and
anyone who may read the run gets it back (docs/api.rst, docs/checking.rst "The ONNX audit").

The views only route: the body is read bounded into a file by prediction_files.receive_file (grading/receive.py),
checked, stored and audited by model_auditing.py; refusals pass through to
errors.DOMAIN_ERRORS (400 naming `model`, `dataset`, `features`, `step` or `precision`;
413 over MLBENCH_MODEL_MAX_BYTES).
"""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.models import Run
from mlbench_master.api.permissions import ModelAccess, check_worker_run
from mlbench_master.api.predictions import (
    FORMS,
    P_DATASET,
    P_FEATURES,
    declared_length,
    features_of,
)
from mlbench_master.grading import audits, model_files, prediction_files
from mlbench_master.runs import frozen
from mlbench_worker.shared.evaluation.model_audit import PRECISIONS

P_STEP = OpenApiParameter(
    "step",
    int,
    description="the evaluation the model made: the step of its stored predictions file "
    "(default: the last stored); for a language model (task 3), the step of a val_perplexity "
    "the run reported (default: the last)",
)
P_PRECISION = OpenApiParameter(
    "precision",
    str,
    enum=list(PRECISIONS),
    description="the arithmetic of that evaluation: fp32 (default), tf32 (a GPU's tensor "
    "cores), fp16 or bf16 (--amp); the audit's tolerance of near-ties depends on it (task 3: "
    "fp32, or tf32 for a run on a GPU; the tolerance of its perplexity)",
)

AUDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {
            "type": "string",
            "enum": ["pending", "matches", "mismatch", "refused", "not audited", "no model"],
        },
        "step": {"type": "integer", "description": "the predictions file audited"},
        "examples": {"type": "integer", "description": "test examples the model is run on"},
        "sample": {"type": "boolean", "description": "a sample, not the whole set"},
        "sample_seed": {
            "type": "integer",
            "description": "the sample's seed, drawn by the master when the model was stored",
        },
        "precision": {"type": "string", "enum": list(PRECISIONS)},
        "tolerance": {"type": "number", "description": "the near-tie gap of that precision"},
        "differ": {"type": "integer", "description": "rows predicted otherwise (ties aside)"},
        "ties": {"type": "integer", "description": "rows that differ within the tolerance"},
        "first_rows": {"type": "array", "items": {"type": "integer"}},
        "why": {"type": "string"},
        "verdict": {
            "type": "string",
            "description": "where the audit is shown 'not audited' as no longer covering the "
            "run's predictions or interrupted: its own status",
        },
        "dataset": {"type": "string"},
        "since": {"type": "string", "description": "when the pending audit began"},
        "audit_id": {"type": "string", "description": "this audit's record (a new one per post)"},
        "audits": {"type": "integer", "description": "models posted for the run so far"},
        "model_sha256": {"type": "string"},
        "model_bytes": {"type": "integer"},
        "predictions_sha256": {"type": "string"},
        # Task 3's (perplexity_audit.py): the model graded by its perplexity, not predictions.
        "kind": {"type": "string", "enum": ["perplexity"], "description": "task 3's audit"},
        "graded": {
            "type": "object",
            "description": "task 3: the evaluator's grade (loss, perplexity, accuracy, "
            "tokens, whole)",
        },
        "reported_perplexity": {
            "type": "number",
            "nullable": True,
            "description": "task 3: the run's own val_perplexity of the step",
        },
        "difference": {
            "type": "number",
            "description": "task 3: how far the two mean losses differ, as a share of the run's",
        },
        "probe_seed": {"type": "integer", "description": "task 3: the look-ahead probe's seed"},
        "grader": {
            "type": "object",
            "description": "the master process running the audit (host, pid, start time): a "
            "pending audit whose process ended reads 'not audited: interrupted'",
        },
        "time_limit_s": {"type": "integer", "description": "task 3: the grade's time limit"},
    },
    "required": ["status"],
}


class RunModel(APIView):
    """POST (check, store and audit the run's final model) and GET (the stored model)."""

    permission_classes = [ModelAccess]
    parser_classes: list = []  # the body is a file read by the view, bounded, never parsed

    def perform_content_negotiation(self, request: Request, force: bool = False):  # noqa: ANN201
        # A download answers whatever Accept says; errors are JSON like every error.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="runs_model_create",
        summary="Hand the run's final model (ONNX) to the platform's audit (the run's worker "
        "token, or a staff user)",
        description="The body is the ONNX file's bytes, one self-contained file. It must "
        "load in onnxruntime, take the task's raw test inputs and give scores of the task's "
        "shape; it is then stored and run, in the background, on the test inputs the "
        "evaluator owns, against the run's stored predictions of `step`: the result is the "
        "run's `evaluation.audit`. A model posted again replaces the earlier one and its "
        "audit. Refused models store nothing. Task 1b's model declares its crop: its input is "
        "N x 3 x S x S with S fixed (64 to 512), and the audit runs it at that S. A language "
        "model (task 3, which posts no predictions) is posted after the run's summary: it is "
        "checked against the run's vocabulary and graded by its perplexity over the whole "
        "validation stream, compared with the run's own val_perplexity of `step` (the audit's "
        "`kind` is then 'perplexity').",
        parameters=[P_DATASET, P_FEATURES, P_STEP, P_PRECISION],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={
            200: OpenApiResponse(
                AUDIT_SCHEMA,
                description="the run has ended and this is its stored model: the audit that stands",
            ),
            202: OpenApiResponse(AUDIT_SCHEMA, description="stored; the audit is pending"),
            **error_responses(
                400,
                401,
                403,
                404,
                409,
                413,
                text={
                    400: "refused (the message names `model`, `dataset`, `features`, `step` "
                    "or `precision` and the problem); nothing was stored",
                    409: "another model is stored (a run's model is write-once), or the run "
                    "has ended without one: its results are frozen",
                    413: "the body is over MLBENCH_MODEL_MAX_BYTES",
                },
            ),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "the model")
        dataset = request.query_params.get("dataset") or ""
        if not dataset:
            raise invalid("dataset", "required: the data set the run evaluated on")
        features = features_of(request)
        step = _step(request)
        precision = request.query_params.get("precision") or "fp32"
        auditor = audits.for_task(run.task)  # grading/audits.py: whichever grades this task
        auditor.check(run, dataset, features, precision)  # before the body
        if request.content_type.split(";")[0].strip() in FORMS:
            raise invalid(
                "model",
                f"the body is a form ({request.content_type.split(';')[0]}); send the ONNX "
                "file's bytes themselves, as application/octet-stream",
            )
        tmp = prediction_files.receive_file(
            request.stream.read if request.stream is not None else (lambda _n: b""),
            run.pk,
            declared_length(request),
            settings.MLBENCH_MODEL_MAX_BYTES,
            into=model_files.folder(run.pk),
            npz=False,
            what="the model",
            setting="MLBENCH_MODEL_MAX_BYTES",
        )
        try:
            if tmp.stat().st_size == 0:
                raise invalid("model", "the body is empty: send the ONNX file's bytes")
            # Write-once (frozen.py): other bytes than the stored model are refused; the
            # same bytes are audited again while the run is active (against a later step),
            # and after its end answered with the audit that stands.
            same = frozen.write_once(run, model_files.model_path(run.pk), tmp, "a model")
            if same and frozen.ended(run):
                return Response(model_files.audit_of(run.pk) or {}, status=status.HTTP_200_OK)
            record = auditor.intake(run, tmp, dataset, features, step, precision)
        finally:
            prediction_files.discard(tmp)  # published by now, unless refused
        return Response(record, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="runs_model_retrieve",
        summary="The run's stored final model (ONNX), byte for byte as posted",
        description="Readers of the run, and the run's own worker token.",
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the model, as an attachment"
            ),
            **error_responses(401, 403, 404, text={404: "no such run, or no model stored"}),
        },
    )
    def get(self, request: Request, pk: int) -> FileResponse:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "the model", verb="read")
        try:
            handle = open(model_files.model_path(run.pk), "rb")  # noqa: SIM115
        except (FileNotFoundError, NotADirectoryError):
            raise exceptions.NotFound(f"run {run.pk} has no model stored") from None
        return FileResponse(
            handle,
            content_type="application/octet-stream",
            as_attachment=True,
            filename=model_files.MODEL,
        )


def _step(request: Request) -> int | None:
    raw = request.query_params.get("step")
    if raw in (None, ""):
        return None
    try:
        step = int(raw)
    except ValueError:
        raise invalid("step", f"{raw[:20]!r} is not a whole number") from None
    if step < 0:
        raise invalid("step", f"{step} is negative: a step counts from 0")
    return step
