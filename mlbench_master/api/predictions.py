"""/api/runs/<id>/predictions/: a run hands its predictions to the platform's evaluator,
and anyone who may read the run gets the files back (docs/api.rst, docs/checking.rst).

The views only route: the body is read bounded into a file by prediction_files.py, graded
and stored by scoring.py; their refusals pass through to errors.DOMAIN_ERRORS (400 naming
`predictions`, `dataset` or `features`; 413 over MLBENCH_PREDICTIONS_MAX_BYTES).
"""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.models import Run
from mlbench_master.api.permissions import PredictionsAccess, check_worker_run
from mlbench_master.grading import prediction_files, scoring
from mlbench_master.runs import lifecycle

_TEXT = {
    400: "refused (the message names `predictions`, `dataset` or `features` and the "
    "problem); nothing was stored",
    409: "the step's file is already stored with other bytes, or the run has ended: its "
    "results are frozen",
    413: "the body is over MLBENCH_PREDICTIONS_MAX_BYTES",
}
FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")
P_DATASET = OpenApiParameter(
    "dataset",
    str,
    required=True,
    description="the data set the run evaluated on: its task's real set (cifar10, imagenet, "
    "epsilon, wmt17) or synthetic",
)
P_FEATURES = OpenApiParameter(
    "features",
    int,
    description="task 2's generated set only: features per row (default 2000)",
)
P_STEP = OpenApiParameter("step", int, OpenApiParameter.PATH, description="the evaluation's step")
GRADE_SCHEMA = {
    "type": "object",
    "properties": {
        "step": {"type": "integer"},
        "epoch": {"type": "number"},
        "elapsed": {"type": "number", "description": "seconds on the benchmark clock"},
        "examples": {"type": "integer", "description": "test examples graded"},
        "dataset": {"type": "string"},
        "metrics": {
            "type": "object",
            "additionalProperties": {"type": "number"},
            "description": "the evaluator's grade: val_accuracy, and val_top5_accuracy "
            "where the task grades it; a translation task's val_bleu (0..100)",
        },
        "signature": {
            "type": "string",
            "description": "how the metric was computed where it has variants: sacrebleu's "
            "signature of a BLEU grade (absent otherwise)",
        },
    },
    "required": ["step", "epoch", "elapsed", "examples", "dataset", "metrics"],
}
UNGRADED_SCHEMA = {
    "type": "object",
    "properties": {"graded": {"type": "boolean"}, "why": {"type": "string"}},
    "required": ["graded", "why"],
}
LIST_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "step": {"type": "integer"},
            "bytes": {"type": "integer"},
            "sha256": {"type": "string"},
            "url": {"type": "string", "format": "uri"},
        },
        "required": ["step", "bytes", "sha256", "url"],
    },
}


def features_of(request: Request) -> int | None:
    raw = request.query_params.get("features")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise invalid("features", f"{raw[:20]!r} is not a whole number") from None


def declared_length(request: Request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None


class RunPredictions(APIView):
    """POST (grade and store one evaluation's file) and GET (the stored files)."""

    permission_classes = [PredictionsAccess]
    parser_classes: list = []  # the body is a file read by the view, bounded, never parsed

    @extend_schema(
        operation_id="runs_predictions_create",
        summary="Hand one evaluation's predictions file (.npz) to the evaluator (the run's "
        "worker token, or a staff user)",
        description="The body is the file's bytes. The platform grades it on the run's test "
        "set (task and seed from the run, the first N examples of `dataset`, N the run's "
        "`test_examples` or the whole set's size: a file predicting another number is "
        "refused) and stores the file and the grade (`evaluated_val_accuracy`, a translation "
        "task's `evaluated_val_bleu` with sacrebleu's signature...). A step's "
        "file is write-once: the same bytes again answer 200 with the grade, other bytes "
        "409; after the run ended nothing new is graded (409). Refused files store nothing.",
        parameters=[P_DATASET, P_FEATURES],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={
            200: OpenApiResponse(
                GRADE_SCHEMA, description="the same file was already stored: its grade"
            ),
            201: OpenApiResponse(GRADE_SCHEMA, description="graded; file and grade stored"),
            202: OpenApiResponse(
                UNGRADED_SCHEMA,
                description="the master lacks the test set's labels: the file is stored "
                "ungraded, for `mlbench evaluate` later",
            ),
            **error_responses(400, 401, 403, 404, 409, 413, text=_TEXT),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "predictions")
        lifecycle.refuse_imported([run.pk], "predictions cannot be posted to it")
        dataset = request.query_params.get("dataset") or ""
        if not dataset:
            raise invalid("dataset", "required: the data set the run evaluated on")
        features = features_of(request)
        scoring.test_set_of(run, dataset, features)  # a wrong parameter before the body
        if request.content_type.split(";")[0].strip() in FORMS:
            raise invalid(
                "predictions",
                f"the body is a form ({request.content_type.split(';')[0]}); send the file's "
                "bytes themselves, as application/octet-stream",
            )
        stream = request.stream
        if stream is None:
            raise invalid("predictions", "the body is empty: send the .npz file's bytes")
        cap = settings.MLBENCH_PREDICTIONS_MAX_BYTES
        tmp = prediction_files.receive_file(stream.read, run.pk, declared_length(request), cap)
        try:
            done = scoring.intake(run, tmp, dataset, features)
        finally:
            prediction_files.discard(tmp)  # published by now, unless refused
        if done.grade is None:
            return Response({"graded": False, "why": done.why}, status=status.HTTP_202_ACCEPTED)
        g = done.grade
        answer = status.HTTP_200_OK if done.replayed else status.HTTP_201_CREATED
        body = {
            "step": g.step,
            "epoch": g.epoch,
            "elapsed": g.elapsed,
            "examples": g.examples,
            "dataset": done.dataset,
            "metrics": g.metrics,
        }
        if g.signature:
            body["signature"] = g.signature
        return Response(body, status=answer)

    @extend_schema(
        operation_id="runs_predictions_list",
        summary="The run's stored predictions files, in step order",
        description="Readers of the run, and the run's own worker token.",
        responses={
            200: OpenApiResponse(LIST_SCHEMA, description="[{step, bytes, sha256, url}]"),
            **error_responses(401, 403, 404),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "predictions", verb="read")
        return Response(
            [
                {
                    "step": f.step,
                    "bytes": f.bytes,
                    "sha256": f.sha256,
                    "url": request.build_absolute_uri(
                        reverse("api:run-prediction", kwargs={"pk": run.pk, "step": f.step})
                    ),
                }
                for f in prediction_files.stored(run.pk)
            ]
        )


class RunPrediction(APIView):
    """GET one stored predictions file, as it was posted."""

    permission_classes = [PredictionsAccess]

    def perform_content_negotiation(self, request: Request, force: bool = False):  # noqa: ANN201
        # A download answers whatever Accept says (application/octet-stream, */*); its
        # errors are JSON like every error of the API.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="runs_predictions_retrieve",
        summary="One stored predictions file (.npz), byte for byte as posted",
        description="Readers of the run, and the run's own worker token.",
        parameters=[P_STEP],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the file, as an attachment"
            ),
            **error_responses(401, 403, 404, text={404: "no such run, or no file of that step"}),
        },
    )
    def get(self, request: Request, pk: int, step: str) -> FileResponse:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "predictions", verb="read")
        path = prediction_files.path(run.pk, int(step))
        try:
            handle = open(path, "rb")  # noqa: SIM115 (FileResponse closes it)
        except FileNotFoundError:
            raise exceptions.NotFound(f"run {run.pk} has no predictions of step {step}") from None
        return FileResponse(
            handle, content_type="application/octet-stream", as_attachment=True, filename=path.name
        )
