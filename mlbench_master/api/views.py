# Over 400 lines: each endpoint's OpenAPI description sits beside its view, as one reads them.
"""REST endpoints. Paths and JSON shapes follow the seed documents; see docs/api.rst.

Views only route: parsing lives in serializers.py / ingest.py / params.py, the rules of a
run in mlbench_master.run_rules, queries in queries.py, run state changes in
mlbench_master.runs.lifecycle. The errors those raise pass through: errors.py answers each.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, HttpResponsePermanentRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import Resolver404, resolve
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions, status
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master import run_rules
from mlbench_master.api import bodies, ingest, params, run_pages
from mlbench_master.api.errors import Conflict, error_responses, invalid
from mlbench_master.api.export import zip_response
from mlbench_master.api.models import Pod, Run
from mlbench_master.api.parsers import FastJSONParser
from mlbench_master.api.permissions import (
    MetricWriters,
    SummaryWriters,
    check_worker_run,
    is_staff,
    is_worker,
)
from mlbench_master.api.serializers import (
    LogPageSerializer,
    MetricBatchResultSerializer,
    MetricPointInSerializer,
    PodSerializer,
    RunCreateSerializer,
    RunDefaultsSerializer,
    RunSerializer,
    RunSummarySerializer,
)
from mlbench_master.common.dates import iso
from mlbench_master.runs import frozen, lifecycle, metrics_store
from mlbench_master.runs.frozen import ended_past_grace
from mlbench_master.runs.logs import STREAMS, read_logs
from mlbench_master.runs.metric_reads import SeriesQuery, series, summarized_json
from mlbench_master.runs.pods import refresh_if_stale


def _errors(*codes: int) -> dict:
    return error_responses(*codes)


READ_ERRORS = _errors(400, 401, 403)

P_SINCE = OpenApiParameter(
    "since",
    OpenApiTypes.DATETIME,
    description="only points newer than this ISO 8601 date (with or without fractional "
    "seconds; 'Z', an offset, or none for UTC). Default: all.",
)
P_TYPE = OpenApiParameter(
    "metric_type", str, enum=["pod", "run"], description="pod (default) or run metrics"
)
P_SUMMARIZE = OpenApiParameter(
    "summarize",
    int,
    description="at most this many points per metric: averages of equal-sized buckets of "
    "consecutive points (date: the bucket's last point), computed in the database",
)
P_LAST_N = OpenApiParameter("last_n", int, description="only the last N points of each metric")
P_FILTER = OpenApiParameter(
    "metric_filter", str, description="comma-separated metric names to return (default: all)"
)
P_DETAILS = OpenApiParameter(
    "details",
    bool,
    description="1/true/yes: every point also carries `cumulative` and `metadata` (the JSON "
    "it was posted with, or null); 0/false/no (default): `date` and `value` only. Not with "
    "`summarize` (an average of several points has no metadata): 400",
)
P_FORMAT = OpenApiParameter(
    "format",
    str,
    enum=["json", "zip"],
    description="zip: a streamed archive with one JSON file per metric (and, for a run, "
    "run.json and its logs)",
)

SERIES_SCHEMA = {
    "type": "object",
    "additionalProperties": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "date": {"type": "string", "format": "date-time"},
                "value": {"type": "number", "format": "double"},
                "elapsed": {
                    "type": "number",
                    "format": "double",
                    "description": "the point's second on the benchmark clock (its "
                    "metadata's elapsed); a summarized point's is its bucket's last point's; "
                    "absent when the point was posted without one",
                },
                "cumulative": {"type": "boolean", "description": "with details=1 only"},
                "metadata": {
                    "nullable": True,
                    "description": "with details=1 only: the point's metadata as posted",
                },
            },
            "required": ["date", "value"],
        },
    },
}

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _details(request: Request) -> bool:
    """The `details` flag (1/true/yes, 0/false/no; default off), refused with `summarize`."""
    q = request.query_params
    raw = q.get("details")
    if raw in (None, ""):
        return False
    flag = raw.strip().lower()
    if flag not in _TRUE + _FALSE:
        raise invalid("details", f"{raw[:20]!r} is not one of 1, true, yes, 0, false, no")
    on = flag in _TRUE
    if on and q.get("summarize") not in (None, ""):
        raise invalid(
            "details",
            "details=1 cannot be combined with summarize: a summarized point is the average "
            "of several points and has no cumulative flag or metadata of its own; drop one "
            "of the two (use last_n or since to get fewer detailed points)",
        )
    return on


def _series_query(request: Request, owner: str, key: str | int | None) -> SeriesQuery:
    q = request.query_params
    return SeriesQuery(
        owner=owner,
        key=key,
        since=params.since(q),
        names=params.name_list(q, "metric_filter"),
        last_n=params.positive_int(q, "last_n"),
        summarize=params.positive_int(q, "summarize", maximum=100000),
    )


class PodList(APIView):
    """GET /api/pods/: the worker pods (slots) of the cluster."""

    @extend_schema(
        summary="List worker pods",
        responses={200: PodSerializer(many=True), **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        refresh_if_stale()
        return Response(PodSerializer(Pod.objects.all(), many=True).data)


class MetricList(APIView):
    """GET /api/metrics/ (every pod's metrics) and POST /api/metrics/ (store points).

    Points are posted by a run's worker token (its own run only) or by a staff user;
    other users may read but not write them.
    """

    # JSON read with orjson first: the platform's hottest path (api/parsers.py says where
    # that is safe, and why only here).
    parser_classes = [FastJSONParser, FormParser, MultiPartParser]

    permission_classes = [MetricWriters]

    @extend_schema(
        operation_id="metrics_list",
        summary="Metrics of every pod (or, with metric_type=run, every run)",
        parameters=[P_SINCE, P_TYPE, P_SUMMARIZE, P_LAST_N, P_FILTER, P_DETAILS],
        responses={
            200: OpenApiResponse(
                {"type": "object", "additionalProperties": SERIES_SCHEMA},
                description="{pod name or run id: {metric name: [{date, value}, ...]}} "
                "(with details=1: [{date, value, cumulative, metadata}, ...])",
            ),
            **READ_ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        owner = params.choice(request.query_params, "metric_type", ("pod", "run"), "pod")
        query = _series_query(request, owner, None)
        return Response(series(query, details=_details(request)))

    @extend_schema(
        summary="Store one metric point, or a list of up to 10,000 (a run's worker token "
        "for its own run, or a staff user)",
        request={
            "application/json": MetricPointInSerializer,
            "application/x-www-form-urlencoded": MetricPointInSerializer,
            "multipart/form-data": MetricPointInSerializer,
        },
        responses={
            201: OpenApiResponse(
                MetricPointInSerializer,
                description="one point: the stored point; a list: {received: N} "
                "(see MetricBatchResult)",
            ),
            **_errors(400, 401, 403, 409, 413),
        },
        examples=[],
    )
    def post(self, request: Request) -> Response:
        rows, many = ingest.parse_points(bodies.body(request))
        ingest.check_owner(rows, request.auth if is_worker(request) else None)
        if is_worker(request):  # the run's own token: its frozen results (frozen.py)
            frozen.check_late_points(request.auth, rows)
            frozen.check_evaluations_once(request.auth, rows)
        metrics_store.store(rows)
        if many:
            return Response(
                MetricBatchResultSerializer({"received": len(rows)}).data,
                status=status.HTTP_201_CREATED,
            )
        row = rows[0]
        body: dict = (
            {"pod_name": row.pod_name} if row.pod_name is not None else {"run_id": row.run_id}
        )
        body.update(
            name=row.name,
            date=iso(row.date),
            value=row.value,
            cumulative=row.cumulative,
            metadata=row.metadata,
        )
        if row.uid is not None:
            body["uid"] = row.uid
        return Response(body, status=status.HTTP_201_CREATED)


class MetricDetail(APIView):
    """GET /api/metrics/<pod_name_or_run_id>/: one pod's or one run's metrics."""

    @extend_schema(
        operation_id="metrics_detail",
        summary="Metrics of one pod (default) or one run (metric_type=run)",
        parameters=[
            OpenApiParameter(
                "pod_name_or_run_id",
                str,
                OpenApiParameter.PATH,
                description="a pod name, or with metric_type=run a run id",
            ),
            P_SINCE,
            P_TYPE,
            P_SUMMARIZE,
            P_LAST_N,
            P_FILTER,
            P_DETAILS,
            P_FORMAT,
        ],
        responses={
            (200, "application/json"): OpenApiResponse(
                SERIES_SCHEMA,
                description="{metric name: [{date, value}, ...]} (with details=1: "
                "[{date, value, cumulative, metadata}, ...])",
            ),
            (200, "application/zip"): OpenApiResponse(
                OpenApiTypes.BINARY, description="with format=zip"
            ),
            **_errors(400, 401, 403, 404),
        },
    )
    def get(
        self, request: Request, pod_name_or_run_id: str
    ) -> Response | HttpResponse | StreamingHttpResponse:
        key = pod_name_or_run_id
        q = request.query_params
        owner = params.choice(q, "metric_type", ("pod", "run"), "pod")
        fmt = params.choice(q, "format", ("json", "zip"), "json")
        run = None
        if owner == "run":
            if not key.isdigit() or len(key) > 18:
                raise invalid("pod_name_or_run_id", f"{key[:40]!r} is not a run id (an integer)")
            run = Run.objects.filter(pk=int(key)).first()
            if run is None:
                raise exceptions.NotFound(f"run {key} does not exist")
        elif key.isdigit() and not Pod.objects.filter(name=key).exists():
            # A run id without metric_type=run (no pod is named by digits alone): a run that
            # does not exist is said, not answered with an empty {}.
            if len(key) > 18 or not Run.objects.filter(pk=int(key)).exists():
                raise exceptions.NotFound(f"run {key[:40]} does not exist")
        query = _series_query(request, owner, run.pk if run else key)
        details = _details(request)
        if fmt == "zip":  # its files carry the details anyway (unless summarized)
            return zip_response(query, run)
        made = None if details else summarized_json(query)
        if made is not None:  # a run's summary, rendered by PostgreSQL (metric_reads.py)
            return HttpResponse(made, content_type="application/json")
        return Response(series(query, details=details).get(str(query.key), {}))


class RunList(APIView):
    """GET /api/runs/ (all runs, newest first; a page of them; the runs picked by id) and
    POST /api/runs/ (start a run)."""

    @extend_schema(
        summary="List runs: all (the original's answer), a page (limit, offset) or the "
        "runs picked by id",
        parameters=[
            OpenApiParameter(
                "limit",
                int,
                description=f"a page of at most this many runs (1 to {run_pages.MAX_LIMIT}), "
                "answered as {count, offset, limit, next_offset, results}; left out: every run, "
                "as a plain array",
            ),
            OpenApiParameter(
                "offset", int, description="with limit: skip this many runs (default 0)"
            ),
            OpenApiParameter(
                "id",
                str,
                description="only these runs (comma-separated or repeated ids, at most "
                f"{run_pages.MAX_IDS}), newest first, as a plain array; an id of no run is a "
                "400; not with limit or offset",
            ),
        ],
        responses={
            200: OpenApiResponse(
                run_pages.ANSWER_SCHEMA,
                description="every run, or the picked ones: an array of runs; with limit: "
                "a page {count, offset, limit, next_offset, results}",
            ),
            **_errors(400, 401, 403),
        },
        operation_id="runs_list",
    )
    def get(self, request: Request) -> Response:
        return Response(run_pages.body(run_pages.read(request.query_params)))

    @extend_schema(
        summary="Create and start a run (with queue=true: wait in the queue when another "
        "run is active)",
        request=RunCreateSerializer,
        responses={201: RunSerializer, **_errors(400, 401, 403, 409, 503)},
    )
    def post(self, request: Request) -> Response:
        serializer = RunCreateSerializer(data=bodies.body(request))
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        queue = bool(fields.pop("queue", False))
        # Refusals (run rules, 409, Redis down) are answered by errors.DOMAIN_ERRORS.
        run = lifecycle.create_run(fields, request.user, queue=queue)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


class RunDefaults(APIView):
    """GET /api/runs/defaults/: the one table of run defaults, as the form and CLI read it."""

    @extend_schema(
        summary="What a run gets for each field it leaves out, and the operator's limits",
        responses={200: RunDefaultsSerializer, **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(RunDefaultsSerializer(run_rules.served()).data)


class RunDetail(APIView):
    """GET /api/runs/<id>/ and DELETE /api/runs/<id>/ (cancels an active run first)."""

    @extend_schema(summary="Get a run", responses={200: RunSerializer, **_errors(401, 403, 404)})
    def get(self, request: Request, pk: int) -> Response:
        return Response(RunSerializer(get_object_or_404(Run, pk=pk)).data)

    @extend_schema(
        summary="Delete a run (an active run is cancelled first); its metrics and logs go too",
        responses={204: None, **_errors(401, 403, 404)},
    )
    def delete(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        lifecycle.delete_run(run, by=str(request.user), staff=is_staff(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunSummary(APIView):
    """POST /api/runs/<id>/summary/: the worker's final summary of the run.

    The summary is the run's published result, so only the run's own worker token or a
    staff user may write it, and only until MLBENCH_RUN_TOKEN_GRACE seconds after the run
    ended (a worker token expires then anyway: 401; staff get 409).
    """

    permission_classes = [SummaryWriters]

    @extend_schema(
        summary="Store the run's summary (this run's worker token, or a staff user; until "
        "MLBENCH_RUN_TOKEN_GRACE seconds after the run ended)",
        request={"application/json": {"type": "object", "additionalProperties": True}},
        responses={200: RunSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        check_worker_run(request, run.pk, "the summary")
        lifecycle.refuse_imported([run.pk], "its summary cannot be posted")
        if ended_past_grace(run):
            raise Conflict(
                f"run {run.pk} ended at {iso(run.finished_at)}, more than "
                f"MLBENCH_RUN_TOKEN_GRACE ({settings.MLBENCH_RUN_TOKEN_GRACE}) seconds ago: "
                "its summary is final and can no longer be posted"
            )
        parsed = RunSummarySerializer(data=bodies.body(request), context={"task": run.task})
        parsed.is_valid(raise_exception=True)
        if frozen.ended(run) and run.summary:
            raise frozen.Frozen(
                f"run {run.pk} ended ({run.state}) with its summary stored: a run's results "
                "are write-once after its end"
            )
        summary = parsed.validated_data
        dataset = summary.get("dataset") or ""
        lifecycle.store_summary(run, summary, dataset)
        return Response(RunSerializer(run).data)


class RunLogs(APIView):
    """GET /api/runs/<id>/logs/?rank=&stream=&offset=: log chunks after an offset."""

    @extend_schema(
        summary="A run's log chunks after an offset",
        parameters=[
            OpenApiParameter("offset", int, description="the next_offset of the last call (0)"),
            OpenApiParameter("rank", int, description="only this rank's output"),
            OpenApiParameter("stream", str, enum=list(STREAMS), description="stdout or stderr"),
            OpenApiParameter("limit", int, description="at most this many chunks (1000)"),
        ],
        responses={200: LogPageSerializer, **_errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        q = request.query_params
        rank = q.get("rank")
        if rank not in (None, ""):
            try:
                rank = int(rank)
            except ValueError:
                raise invalid("rank", f"{rank[:20]!r} is not a rank number") from None
        else:
            rank = None
        stream = q.get("stream") or None
        if stream is not None and stream not in STREAMS:
            raise invalid("stream", f"{stream[:20]!r} is not one of stdout, stderr")
        page = read_logs(
            run,
            offset=params.non_negative_int(q, "offset"),
            rank=rank,
            stream=stream,
            limit=params.positive_int(q, "limit", maximum=10000) or 1000,
        )
        return Response(LogPageSerializer(page).data)


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
@authentication_classes([])
@permission_classes([])
def not_found(request: Request) -> Response | HttpResponsePermanentRedirect:
    """Any /api/ path no route takes: 404 naming the path and where the list of paths is.

    A GET of a page that exists with a trailing slash (/api/docs) is redirected there, as
    Django's APPEND_SLASH would have done had this catch-all not matched first.
    """
    if request.method in ("GET", "HEAD") and not request.path.endswith("/"):
        try:
            resolved = resolve(request.path + "/")
        except Resolver404:
            resolved = None
        if resolved is not None and resolved.func is not not_found:
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(
                request.path + "/" + (f"?{query}" if query else "")
            )
    raise exceptions.NotFound(
        f"no API endpoint at {request.path!r}; see /api/docs/ for the endpoints "
        "(ids are whole numbers, e.g. /api/runs/3/)"
    )
