"""Result bundles over HTTP (docs/publishing.rst, docs/api.rst "Result bundles").

Views only route: bundles/writer.py streams an export, bundles/importer.py verifies and
stores an import, bundles/signing.py names this installation. Their refusals pass to
errors.DOMAIN_ERRORS: 400 naming the member or the signature, 409, 413.

Exports are reads (the API's read rule: users, or everyone when MLBENCH_PUBLIC_READ=true);
an import writes, so it needs a user's token or a signed-in session (never anonymous, never
a run's worker token).
"""

from __future__ import annotations

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.models import ImportedBundle, Run, Series, Study
from mlbench_master.bundles import importer, layout, signing, study_member, upload, writer
from mlbench_master.common.dates import iso

_TEXT = {
    400: "the bundle is refused: the message names the member or the signature; nothing was stored",
    404: "no such run, series or study (the message says which)",
    409: "a run has not ended (export; a study: a run still pending), or the bundle holds "
    "this installation's own runs",
    413: "the bundle is over MLBENCH_BUNDLE_MAX_BYTES",
}
ZIP = {(200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description="the bundle")}
INSTALLATION_SCHEMA = {
    "type": "object",
    "properties": {
        "public_key": {"type": "string", "description": "Ed25519 public key, base64 (32 bytes)"},
        "fingerprint": {"type": "string", "description": "what a person compares"},
        "algorithm": {"type": "string", "enum": [signing.ALGORITHM]},
        "bundle_format": {"type": "integer"},
    },
    "required": ["public_key", "fingerprint", "algorithm", "bundle_format"],
}
ORIGIN_SCHEMA = {
    "type": "object",
    "properties": {
        "public_key": {"type": "string"},
        "fingerprint": {"type": "string"},
    },
}
IMPORTED_SCHEMA = {
    "type": "object",
    "properties": {
        "bundle": {"type": "object", "description": "the bundle as stored (see the list)"},
        "stored": {"type": "integer", "description": "runs stored by this import"},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "the run here"},
                    "origin_run": {"type": "integer", "description": "its id at its origin"},
                    "origin": {"type": "string", "description": "the origin's fingerprint"},
                    "new": {"type": "boolean", "description": "false: it was here already"},
                },
            },
        },
        "series": {"type": "array", "items": {"type": "integer"}},
        "studies": {
            "type": "array",
            "description": "a study bundle's study: its id here, its id at its origin "
            "(origin_study), the origin's fingerprint, the trust in it, and whether it was "
            "stored now (new) or was here already",
            "items": {"type": "object"},
        },
        "file": {
            "type": "object",
            "description": "the file imported (its SHA-256 and signer); `bundle` is the "
            "origin's, which it carries when the runs were exported again elsewhere",
            "properties": {"digest": {"type": "string"}, "origin": ORIGIN_SCHEMA},
        },
    },
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


def _user(request: Request) -> str:
    user = request.user
    return user.get_username() if getattr(user, "is_authenticated", False) else "anonymous"


def _zip(selection: writer.Selection, request: Request, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        writer.stream(selection, _user(request)), content_type="application/zip"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def bundle_json(bundle: ImportedBundle) -> dict:
    """An imported bundle as the API shows it."""
    return {
        "id": bundle.pk,
        "digest": bundle.digest,
        "origin": {"public_key": bundle.origin_key, "fingerprint": bundle.origin_fingerprint},
        "exported_at": iso(bundle.exported_at) if bundle.exported_at else None,
        "exported_by": bundle.exported_by,
        "imported_at": iso(bundle.imported_at),
        "imported_by": bundle.imported_by.get_username() if bundle.imported_by_id else "",
        "received_via": bundle.received_via,
        "runs": sorted(bundle.runs.values_list("run_id", flat=True)),
    }


class Installation(APIView):
    """GET /api/installation/: this installation's public key and fingerprint."""

    @extend_schema(
        summary="This installation's signing key (public half) and its fingerprint",
        responses={200: OpenApiResponse(INSTALLATION_SCHEMA), **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response({**signing.this_installation().as_dict(), "bundle_format": layout.VERSION})


class RunBundle(APIView):
    """GET /api/runs/<id>/bundle/: one run as a signed bundle."""

    @extend_schema(
        operation_id="runs_bundle_retrieve",
        summary="Export one ended run as a signed result bundle (zip)",
        responses={**ZIP, **_errors(401, 403, 404, 409)},
    )
    def get(self, request: Request, pk: int) -> StreamingHttpResponse:
        run = get_object_or_404(Run, pk=pk)
        return _zip(writer.select([run]), request, f"mlbench-run-{pk}-bundle.zip")


class RunsBundle(APIView):
    """GET /api/runs/bundle/?runs=1,2,3: several runs as one signed bundle."""

    @extend_schema(
        operation_id="runs_bundle_list",
        summary="Export several ended runs as one signed result bundle (zip)",
        parameters=[
            OpenApiParameter("runs", str, required=True, description="run ids, comma-separated")
        ],
        responses={**ZIP, **_errors(400, 401, 403, 404, 409)},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        raw = request.query_params.get("runs") or ""
        wanted = [w.strip() for w in raw.split(",") if w.strip()]
        if (
            not wanted
            or len(wanted) > 1000
            or not all(w.isdigit() and len(w) <= 18 for w in wanted)
        ):
            raise invalid("runs", "give the run ids to export, comma-separated: ?runs=3,4")
        ids = sorted({int(w) for w in wanted})
        found = list(Run.objects.filter(pk__in=ids))
        if missing := sorted(set(ids) - {r.pk for r in found}):
            raise NotFound(f"run {missing[0]} does not exist")
        label = "-".join(str(i) for i in ids[:5]) + ("-and-more" if len(ids) > 5 else "")
        return _zip(writer.select(found), request, f"mlbench-runs-{label}-bundle.zip")


class SeriesBundle(APIView):
    """GET /api/series/<id>/bundle/: a series and its runs as a signed bundle."""

    @extend_schema(
        operation_id="series_bundle_retrieve",
        summary="Export a series (every run ended) as a signed result bundle (zip)",
        responses={**ZIP, **_errors(401, 403, 404, 409)},
    )
    def get(self, request: Request, pk: int) -> StreamingHttpResponse:
        series = get_object_or_404(Series, pk=pk)
        selection = writer.select(series.runs.all(), series)
        return _zip(selection, request, f"mlbench-series-{pk}-bundle.zip")


class StudyBundle(APIView):
    """GET /api/studies/<id>/bundle/: a study, every run of its cells and their series."""

    @extend_schema(
        operation_id="studies_bundle_retrieve",
        summary="Export a study (no run pending) with every run of its cells as a signed "
        "result bundle (zip); its score is not in it: the importing master computes it",
        responses={**ZIP, **_errors(401, 403, 404, 409)},
    )
    def get(self, request: Request, pk: int) -> StreamingHttpResponse:
        study = get_object_or_404(Study, pk=pk)
        return _zip(study_member.select(study), request, f"mlbench-study-{pk}-bundle.zip")


class _Unread(BaseParser):
    """Admits a bundle's body without reading it: a signed-in session's CSRF check reads
    the request's form fields, which must find none rather than refuse the media type; the
    view then reads the body itself, bounded (upload.py)."""

    media_type = "application/zip"

    def parse(self, stream, media_type=None, parser_context=None) -> dict:  # noqa: ANN001
        return {}


class _UnreadOctets(_Unread):
    media_type = "application/octet-stream"


class Bundles(APIView):
    """GET /api/bundles/ (the bundles imported here) and POST /api/bundles/ (import one)."""

    parser_classes = [_Unread, _UnreadOctets]

    @extend_schema(
        operation_id="bundles_list",
        summary="The bundles imported into this master, newest first",
        responses={200: OpenApiResponse({"type": "array", "items": {"type": "object"}}),
                   **_errors(401, 403)},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        found = ImportedBundle.objects.select_related("imported_by")
        return Response([bundle_json(b) for b in found])

    @extend_schema(
        operation_id="bundles_create",
        summary="Import a result bundle: verified first, then its runs stored read-only",
        description="The body is the bundle file's bytes (application/zip). Refused bundles "
        "store nothing. 201 when runs (or a study) were stored, 200 when every run (and the "
        "study) was here already.",
        request={"application/zip": OpenApiTypes.BINARY},
        responses={
            201: OpenApiResponse(IMPORTED_SCHEMA, description="runs stored"),
            200: OpenApiResponse(IMPORTED_SCHEMA, description="nothing new: all were here"),
            **_errors(400, 401, 403, 409, 413),
        },
    )
    def post(self, request: Request) -> Response:
        kind = (request.content_type or "").split(";")[0].strip()
        if kind in ("multipart/form-data", "application/x-www-form-urlencoded"):
            raise invalid(
                "bundle", f"the body is a form ({kind}); send the file's bytes, as application/zip"
            )
        stream = request.stream
        if stream is None:
            raise invalid("bundle", "the body is empty: send the bundle file's bytes")
        with upload.received(stream.read, _declared(request)) as path:
            done = importer.import_file(path, request.user)
        return Response(imported_json(done), status=201 if done.new else 200)


def imported_json(done: importer.Imported) -> dict:
    return {
        "bundle": bundle_json(done.bundle),
        "stored": done.stored,
        "runs": done.runs,
        "series": done.series,
        "studies": done.studies,
        "file": done.file,
    }


def _declared(request: Request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) or None
    except ValueError:
        return None
