"""/api/algorithms/: a researcher's own training algorithm, uploaded once and named by runs
by its SHA-256 (docs/api.rst "Outside algorithms").

The views only route: the body is read bounded (grading/receive.py, under
MLBENCH_MAX_ALGORITHM_BYTES), checked by its declaration (mlbench_worker/shared/
algorithm_source.py) and stored by runs/algorithm_files.py. Uploading is staff only, as a
custom command is: the file runs on every worker. A rank fetches the file of its own run
with the run's worker token and checks its hash before importing it.
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, status
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.permissions import WORKER_ONLY, ReadPublicOrUser, is_staff, is_worker
from mlbench_master.grading import receive
from mlbench_master.runs import algorithm_files
from mlbench_worker.shared.algorithm_source import DeclarationError

# What a multipart body may carry besides the file (boundaries, headers, other fields).
FORM_SLACK = 64 * 1024
FIELD = "source"
STAFF_ONLY = "an uploaded algorithm runs code of your choice on the workers"
CONTENT_TYPE = "text/x-python; charset=utf-8"

ALGORITHM_SCHEMA = {
    "type": "object",
    "properties": {
        "sha256": {"type": "string", "description": "what runs name it by (algorithm_source)"},
        "name": {"type": "string", "description": "its NAME"},
        "api": {"type": "integer", "description": "the interface version it declares (API)"},
        "options": {
            "type": "array",
            "items": {"type": "object"},
            "description": "its OPTIONS: name, type, default, help, bounds, choices",
        },
        "size": {"type": "integer", "description": "bytes"},
        "class_name": {"type": "string", "description": "its class deriving from Algorithm"},
        "methods": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the interface's methods it defines",
        },
    },
    "required": ["sha256", "name", "api", "options", "size"],
}


class AlgorithmAccess(permissions.BasePermission):
    """POST: staff users only. GET: readers, and a worker token (the view checks that its
    run uses the file)."""

    message = ReadPublicOrUser.message

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = WORKER_ONLY + ", and read its algorithm's source"
            return request.method in ("GET", "HEAD")
        if request.method in permissions.SAFE_METHODS:
            return ReadPublicOrUser().has_permission(request, view)
        if not (request.user and request.user.is_authenticated):
            return False  # DRF answers 401
        if is_staff(request):
            return True
        self.message = (
            f"{STAFF_ONLY}: only staff users may upload one; user "
            f"{request.user.get_username()!r} is not staff"
        )
        return False


class _BoundedForm(MultiPartParser):
    """A multipart form, parsed by Django's reader only when its declared length is within
    the cap (plus the form's own bytes): the reader would otherwise spool any size to disk.
    A signed-in session's CSRF check parses the body before the view runs, hence here."""

    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201
        declared = _declared((parser_context or {})["request"])
        cap = algorithm_files.cap()
        if declared is None or declared > cap + FORM_SLACK:
            size = f"{declared} bytes" if declared else "of unknown length"
            raise receive.too_large(size, cap, "the form", algorithm_files.SETTING)
        return super().parse(stream, media_type, parser_context)


class _Unread(BaseParser):
    """Any other body is admitted unread (the CSRF check then finds no form fields); the
    view reads it itself, bounded (algorithm_files.receive_upload)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> dict:  # noqa: ANN001
        return {}


class Algorithms(APIView):
    """POST /api/algorithms/: upload an algorithm's source file."""

    permission_classes = [AlgorithmAccess]
    # A form's file is parsed by Django's multipart reader (after the declared length is
    # checked); any other body is the file itself, read by the view, bounded.
    parser_classes = [_BoundedForm, _Unread]

    @extend_schema(
        operation_id="algorithms_create",
        summary="Upload an outside training algorithm's source (staff only)",
        description="The body is the Python file itself (text/x-python, or any non-form "
        "type), or a multipart form with the file in field `source`. It is read without "
        "being run: NAME, API and OPTIONS must be literals, it may import only "
        "mlbench_worker.algorithms.public of mlbench, and exactly one class derives from "
        "Algorithm and defines finish. Stored by its SHA-256, which a run names as "
        "algorithm_source. Refused files store nothing.",
        request={"text/x-python": OpenApiTypes.BINARY, "multipart/form-data": OpenApiTypes.OBJECT},
        responses={
            201: OpenApiResponse(ALGORITHM_SCHEMA, description="stored"),
            200: OpenApiResponse(ALGORITHM_SCHEMA, description="the same bytes were stored"),
            **error_responses(
                400,
                401,
                403,
                413,
                text={
                    400: "not an algorithm module: the message under `source` says what "
                    "(not Python, a missing or non-literal NAME, API or OPTIONS, no class "
                    "deriving from Algorithm, no finish, an unsupported API, a built-in NAME)",
                    413: "the file is over MLBENCH_MAX_ALGORITHM_BYTES",
                },
            ),
        },
    )
    def post(self, request: Request) -> Response:
        kind = (request.content_type or "").split(";")[0].strip().lower()
        declared = _declared(request)
        if kind == "multipart/form-data":
            upload = request.FILES.get(FIELD)  # _BoundedForm held the form to the cap
            if upload is None:
                raise invalid(FIELD, f"the form has no file in field {FIELD!r}")
            read, declared = upload.read, upload.size
        elif kind == "application/x-www-form-urlencoded":
            raise invalid(FIELD, "send the .py file's bytes, or a multipart form")
        else:
            read = request.stream.read if request.stream is not None else (lambda _n: b"")
        try:
            stored = algorithm_files.receive_upload(read, declared)
        except DeclarationError as exc:
            raise invalid(FIELD, str(exc)) from None
        answer = algorithm_files.answer(stored)
        return Response(answer, status=status.HTTP_201_CREATED if stored.new else 200)


class AlgorithmSource(APIView):
    """GET /api/algorithms/<sha256>/: the stored source, byte for byte."""

    permission_classes = [AlgorithmAccess]

    def perform_content_negotiation(self, request: Request, force: bool = False):  # noqa: ANN201
        # The source answers whatever Accept says; errors are JSON like every error.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="algorithms_retrieve",
        summary="An uploaded algorithm's source (readers; a run's worker token for its own "
        "run's algorithm)",
        responses={
            (200, "text/x-python"): OpenApiResponse(OpenApiTypes.STR, description="the file"),
            **error_responses(401, 403, 404, text={404: "no algorithm with this SHA-256"}),
        },
    )
    def get(self, request: Request, sha256: str) -> HttpResponse:
        if is_worker(request) and request.auth.algorithm_source != sha256:
            raise exceptions.PermissionDenied(
                f"the worker token of run {request.auth.pk} may read only its own run's algorithm"
            )
        source = algorithm_files.source(sha256)
        if source is None:
            raise exceptions.NotFound(f"no algorithm {sha256[:12]}... is stored on this master")
        response = HttpResponse(source, content_type=CONTENT_TYPE)
        response["Content-Disposition"] = f'inline; filename="{sha256}.py"'
        return response


def _declared(request: Request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) or None
    except ValueError:
        return None
