"""A run's and a series' results for others to check: MLPerf-format logs (written by
MLCommons' `mllog`, checked by their checker) and charts as PNG or SVG.

Reads, so the API's read rule applies (permissions.ReadPublicOrUser, the default): users,
or everyone when MLBENCH_PUBLIC_READ=true. An unknown run, series, chart or format answers
404 naming which; a chart the data cannot give yet (a speed-up without 1-worker runs that
reached the target) answers 409 saying what is missing.
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from mlbench_master.api.errors import error_responses
from mlbench_master.api.models import Run, Series
from mlbench_master.results import kept_runs, mllog, statistics, stored
from mlbench_worker.shared import catalogue, plots

RUN_CHARTS = ("accuracy", "time-split")
SERIES_CHARTS = plots.CHARTS
CONTENT_TYPES = {"png": "image/png", "svg": "image/svg+xml"}

_TEXT = {
    404: "no such run, series, chart or format (the message says which)",
    409: "the chart cannot be drawn from the data yet (the message says why)",
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


def _run(pk: int) -> Run:
    run = Run.objects.filter(pk=pk).first()
    if run is None:
        raise exceptions.NotFound(f"run {pk} does not exist")
    return run


def _series(pk: int) -> Series:
    series = Series.objects.filter(pk=pk).first()
    if series is None:
        raise exceptions.NotFound(f"series {pk} does not exist")
    return series


def _trains(run: Run) -> None:
    """A measurement or the user's own command trains nothing of ours: no training log."""
    if catalogue.is_measurement(run.task):
        raise exceptions.NotFound(
            f"run {run.pk} is a measurement ({run.task}): it has no MLPerf training log"
        )
    if run.open_division:
        raise exceptions.NotFound(
            f"run {run.pk} ran its own command: mlbench has no training record to log"
        )


def _attachment(body: bytes | str, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _chart(data: dict, chart: str, fmt: str, allowed: tuple[str, ...], title: str) -> bytes:
    if chart not in allowed:
        raise exceptions.NotFound(f"chart {chart!r} is not one of {', '.join(allowed)}")
    if fmt not in CONTENT_TYPES:
        raise exceptions.NotFound(f"format {fmt!r} is not one of {', '.join(CONTENT_TYPES)}")
    # A chart the data cannot give yet (plots.PlotError) is a 409: errors.DOMAIN_ERRORS.
    return plots.render(chart, data, fmt, title=title)


P_CHART = OpenApiParameter("chart", str, OpenApiParameter.PATH, description="the chart")
P_FMT = OpenApiParameter("fmt", str, OpenApiParameter.PATH, enum=list(CONTENT_TYPES))
IMAGE = {
    (200, "image/png"): OpenApiTypes.BINARY,
    (200, "image/svg+xml"): OpenApiTypes.STR,
}


class RunMllog(APIView):
    """GET /api/runs/<id>/mllog/: the run's MLPerf-format result log."""

    @extend_schema(
        summary="A run's result log in MLPerf Training's format (:::MLLOG lines)",
        responses={(200, "text/plain"): OpenApiTypes.STR, **_errors(401, 403, 404)},
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        run = _run(pk)
        _trains(run)
        return _attachment(mllog.run_log(run), "text/plain; charset=utf-8", f"run_{pk}_mllog.txt")


class SeriesMllog(APIView):
    """GET /api/series/<id>/mllog/: a zip of result_N.txt in MLPerf's submission layout."""

    @extend_schema(
        summary="A series' result logs, one result_N.txt per seed in MLPerf's layout (zip)",
        responses={(200, "application/zip"): OpenApiTypes.BINARY, **_errors(401, 403, 404)},
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        series = _series(pk)
        task = (series.settings or {}).get("task")
        if task and catalogue.is_measurement(task):
            raise exceptions.NotFound(f"series {pk} measures ({task}): no training logs")
        return _attachment(mllog.series_zip(series), "application/zip", f"series_{pk}_mllog.zip")


class RunPlot(APIView):
    """GET /api/runs/<id>/plots/<chart>.<png|svg>: accuracy against time, time split."""

    @extend_schema(
        summary="A chart of a run (accuracy, time-split) as PNG or SVG",
        operation_id="runs_plot_retrieve",
        parameters=[
            OpenApiParameter(
                "chart", str, OpenApiParameter.PATH, enum=list(RUN_CHARTS), description="chart"
            ),
            P_FMT,
        ],
        responses={**IMAGE, **_errors(401, 403, 404, 409)},
    )
    def get(self, request: Request, pk: int, chart: str, fmt: str) -> HttpResponse:
        run = _run(pk)
        data = statistics.summarize(
            kept_runs.results_of([run]),
            stored.target_for(run.task, run.target, [run.dataset_used] if run.dataset_used else []),
        )
        image = _chart(data, chart, fmt, RUN_CHARTS, f"run {run.pk} {run.name}")
        return _attachment(image, CONTENT_TYPES[fmt], f"run_{pk}_{chart}.{fmt}")


class SeriesPlot(APIView):
    """GET /api/series/<id>/plots/<chart>.<png|svg>: accuracy with a band, speed-up, split."""

    @extend_schema(
        summary="A chart of a series (accuracy, speedup, time-split, cost) as PNG or SVG",
        operation_id="series_plot_retrieve",
        parameters=[
            OpenApiParameter(
                "chart", str, OpenApiParameter.PATH, enum=list(SERIES_CHARTS), description="chart"
            ),
            P_FMT,
        ],
        responses={**IMAGE, **_errors(401, 403, 404, 409)},
    )
    def get(self, request: Request, pk: int, chart: str, fmt: str) -> HttpResponse:
        series = _series(pk)
        image = _chart(
            statistics.for_series(series),
            chart,
            fmt,
            SERIES_CHARTS,
            f"series {series.pk} {series.name}",
        )
        return _attachment(image, CONTENT_TYPES[fmt], f"series_{pk}_{chart}.{fmt}")
