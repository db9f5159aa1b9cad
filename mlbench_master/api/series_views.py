"""REST endpoints of run series (docs/api.rst, *Run series and the queue*).

Views only route: a series is planned, stored and cancelled by mlbench_master.runs.series, its
statistics computed by mlbench_master.results.statistics (one module: the dashboard and
the CLI show what this API answers).
"""

from __future__ import annotations

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api import bodies
from mlbench_master.api.errors import Conflict, error_responses
from mlbench_master.api.models import Run, Series
from mlbench_master.api.permissions import is_staff
from mlbench_master.api.series_serializers import (
    SeriesCreateSerializer,
    SeriesDetailSerializer,
    SeriesSerializer,
)
from mlbench_master.bundles import origins
from mlbench_master.results.statistics import for_series
from mlbench_master.runs import series as series_rules

_TEXT = {
    400: "invalid input (the message names the field); nothing is stored",
    404: "no such series",
    409: "nothing of the series is queued or active",
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


def _with_runs() -> Prefetch:
    return Prefetch("runs", queryset=origins.with_origins(Run.objects.order_by("id")))


def detail(series: Series) -> dict:
    """The series' JSON with its statistics (what GET /api/series/<id>/ answers)."""
    body = dict(SeriesSerializer(series, context={}).data)
    body["statistics"] = for_series(series)
    return body


class SeriesList(APIView):
    """GET /api/series/ (newest first) and POST /api/series/ (queue a series)."""

    @extend_schema(
        operation_id="series_list",
        summary="List run series",
        responses={200: SeriesSerializer(many=True), **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        found = Series.objects.select_related("created_by").prefetch_related(_with_runs())
        return Response(SeriesSerializer(found, many=True, context={}).data)

    @extend_schema(
        operation_id="series_create",
        summary="Create a series: the same run over seeds and/or worker counts, queued",
        request=SeriesCreateSerializer,
        responses={201: SeriesSerializer, **_errors(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        parsed = SeriesCreateSerializer(data=bodies.body(request))
        parsed.is_valid(raise_exception=True)
        # A refused run (400 naming the field, 403 staff only) is answered by errors.py.
        created = series_rules.create_series(dict(parsed.validated_data), request.user)
        return Response(SeriesSerializer(created, context={}).data, status=status.HTTP_201_CREATED)


class SeriesDetail(APIView):
    """GET /api/series/<id>/ (with statistics) and DELETE (cancel, then delete)."""

    @extend_schema(
        operation_id="series_retrieve",
        summary="Get a series with its runs and statistics",
        responses={
            200: OpenApiResponse(
                SeriesDetailSerializer, description="the series, its runs and `statistics`"
            ),
            **_errors(401, 403, 404),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(detail(get_object_or_404(Series, pk=pk)))

    @extend_schema(
        operation_id="series_destroy",
        summary="Delete a series and its runs (an active run of it is cancelled first)",
        responses={204: None, **_errors(401, 403, 404)},
    )
    def delete(self, request: Request, pk: int) -> Response:
        found = get_object_or_404(Series, pk=pk)
        series_rules.delete_series(found, by=str(request.user), staff=is_staff(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SeriesCancel(APIView):
    """POST /api/series/<id>/cancel/: drop its queued runs, cancel its active one; keep
    it and its ended runs (their results)."""

    @extend_schema(
        operation_id="series_cancel",
        summary="Cancel a series: its queued runs are dropped (CANCELLED), its active run "
        "cancelled; the series and its ended runs are kept",
        request=None,
        responses={200: SeriesSerializer, **_errors(401, 403, 404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        found = get_object_or_404(Series, pk=pk)
        if not series_rules.cancel_series(found, by=str(request.user)):
            raise Conflict(
                f"series {found.pk} has no queued or active run left to cancel; "
                "DELETE /api/series/<id>/ removes it"
            )
        return Response(SeriesSerializer(found, context={}).data)
