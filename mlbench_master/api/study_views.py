"""REST endpoints of algorithm studies (docs/api.rst, *Algorithm studies*).

Views only route: a study is planned and stored by mlbench_master.studies.store, its numbers
and score computed by mlbench_master.studies.outcomes (the dashboard and the CLI show what
this API answers)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api import bodies
from mlbench_master.api.errors import Conflict, error_responses
from mlbench_master.api.models import Study
from mlbench_master.api.study_serializers import StudyCreateSerializer, study_json
from mlbench_master.studies import store
from mlbench_master.studies.outcomes import study_numbers

_TEXT = {
    400: "invalid input (the message names the field); nothing is stored or queued",
    404: "no such study",
    409: "nothing of the study is queued or active",
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


def detail(study: Study) -> dict:
    """The study with its cells, their runs and medians, and its score once complete."""
    return {**study_json(study), **study_numbers(study)}


class StudyList(APIView):
    """GET /api/studies/ (newest first) and POST /api/studies/ (queue a study)."""

    @extend_schema(
        operation_id="studies_list",
        summary="List algorithm studies",
        responses={200: OpenApiResponse(description="the studies, newest first"),
                   **_errors(401, 403)},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        studies = Study.objects.select_related("created_by").prefetch_related("cells")
        return Response([study_json(s) for s in studies])

    @extend_schema(
        operation_id="studies_create",
        summary="Create an algorithm study: algorithms x the suite's workloads x network "
        "conditions x seeds, queued, with held-out variants drawn now",
        request=StudyCreateSerializer,
        responses={201: OpenApiResponse(description="the study"), **_errors(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        parsed = StudyCreateSerializer(data=bodies.body(request))
        parsed.is_valid(raise_exception=True)
        given = {k: v for k, v in parsed.validated_data.items() if v is not None}
        # A refused study (400 naming the field, 403 staff only) is answered by errors.py.
        created = store.create_study(given, request.user)
        return Response(detail(created), status=status.HTTP_201_CREATED)


class StudyDetail(APIView):
    """GET /api/studies/<id>/: the study, its cells and its score."""

    @extend_schema(
        operation_id="studies_retrieve",
        summary="Get a study with its cells, runs, medians and score",
        responses={200: OpenApiResponse(description="the study"), **_errors(401, 403, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        # Its creator and cells read with it: study_json and study_numbers both need them.
        found = Study.objects.select_related("created_by").prefetch_related("cells")
        return Response(detail(get_object_or_404(found, pk=pk)))


class StudyCancel(APIView):
    """POST /api/studies/<id>/cancel/: its queued runs dropped, its active run cancelled."""

    @extend_schema(
        operation_id="studies_cancel",
        summary="Cancel a study: its queued runs are dropped, its active run cancelled; "
        "ended runs and their grades are kept (a cancelled run counts as a miss)",
        request=None,
        responses={200: OpenApiResponse(description="the study"),
                   **_errors(401, 403, 404, 409)},
    )  # fmt: skip
    def post(self, request: Request, pk: int) -> Response:
        found = get_object_or_404(Study, pk=pk)
        if not store.cancel_study(found, by=str(request.user)):
            raise Conflict(f"study {found.pk} has no queued or active run left to cancel")
        return Response(detail(found))
