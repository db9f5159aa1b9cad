"""The keys this installation trusts, over HTTP (docs/api.rst "Trusted keys",
docs/publishing.rst "Whose results rank"): GET /api/trust/ (a read, as every result read),
POST /api/trust/ and DELETE /api/trust/<fingerprint>/ (staff only: a trusted key decides
which imported results rank). bundles/trust.py checks and stores; this only routes, and
says its refusals in the API's one error shape, naming the field.
"""

from __future__ import annotations

from django.db.models import Count
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api import bodies
from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.models import RunOrigin
from mlbench_master.api.permissions import WORKER_ONLY, ReadPublicOrUser, is_staff, is_worker
from mlbench_master.bundles import trust

FIELDS = ("key", "name")
_TEXT = {
    400: "invalid input (the message names the field: key, name or fingerprint)",
    403: "only a staff user may change the trusted keys",
    404: "no trusted key has this fingerprint",
    409: "this installation's own key (always trusted, never removed), or a key trusted already",
}
KEY_SCHEMA = {
    "type": "object",
    "properties": {
        "public_key": {"type": "string", "description": "Ed25519 public key, base64 (32 bytes)"},
        "fingerprint": {"type": "string", "description": "computed by this master from the key"},
        "name": {"type": "string", "description": "whose key it is"},
        "own": {"type": "boolean", "description": "this installation's own key"},
        "added_by": {"type": "string", "nullable": True},
        "added_at": {"type": "string", "format": "date-time", "nullable": True},
        "runs": {"type": "integer", "description": "imported runs signed by this key"},
    },
}
REQUEST_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "the installation's Ed25519 public key, base64"},
        "name": {"type": "string", "description": "whose key it is (at most 200 characters)"},
    },
    "required": ["key", "name"],
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


class TrustWriters(permissions.BasePermission):
    """Reads as every other read (`ReadPublicOrUser`); changes by staff users only (a token,
    or a signed-in session with its CSRF token)."""

    message = ReadPublicOrUser.message

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = WORKER_ONLY
            return False
        if request.method in permissions.SAFE_METHODS:
            return ReadPublicOrUser().has_permission(request, view)
        if not (request.user and request.user.is_authenticated):
            return False  # DRF answers 401 (not authenticated)
        if is_staff(request):
            return True
        self.message = (
            "the trusted keys may only be changed by a staff user; user "
            f"{request.user.get_username()!r} is not staff"
        )
        return False


def _runs_by_key() -> dict[str, int]:
    rows = RunOrigin.objects.values("origin_key").annotate(n=Count("id"))
    return {row["origin_key"]: row["n"] for row in rows}


class TrustList(APIView):
    """GET /api/trust/ (the trusted keys, this installation's own first) and POST (trust
    one more; staff)."""

    permission_classes = [TrustWriters]

    @extend_schema(
        operation_id="trust_list",
        summary="The keys whose imported results rank here: this installation's own first",
        responses={
            200: OpenApiResponse({"type": "array", "items": KEY_SCHEMA}),
            **_errors(401, 403),
        },
    )
    def get(self, request: Request) -> Response:
        counts = _runs_by_key()
        return Response([{**k, "runs": counts.get(k["public_key"], 0)} for k in trust.listed()])

    @extend_schema(
        operation_id="trust_create",
        summary="Trust an installation's key (staff): its imported results rank from now on",
        request={"application/json": REQUEST_SCHEMA},
        responses={201: OpenApiResponse(KEY_SCHEMA), **_errors(400, 401, 403, 409)},
    )
    def post(self, request: Request) -> Response:
        body = bodies.body(request)
        if not isinstance(body, dict):
            raise invalid("key", 'send a JSON object: {"key": "<base64>", "name": "..."}')
        for field in body:
            if field not in FIELDS:
                why = (
                    "is computed by this master from the key; do not send it"
                    if field == "fingerprint"
                    else f"unknown field; allowed: {', '.join(FIELDS)}"
                )
                raise invalid(str(field)[:40], why)
        row = trust.add(body.get("key"), body.get("name"), request.user)  # refusals: errors.py
        runs = RunOrigin.objects.filter(origin_key=row.public_key).count()
        return Response({**trust.as_json(row), "runs": runs}, status=status.HTTP_201_CREATED)


class TrustDetail(APIView):
    """DELETE /api/trust/<fingerprint>/: stop trusting a key (staff); its imported runs are
    unverified again at once."""

    permission_classes = [TrustWriters]

    @extend_schema(
        operation_id="trust_destroy",
        summary="Stop trusting a key (staff): its imported results are unranked again",
        parameters=[
            OpenApiParameter(
                "fingerprint",
                str,
                OpenApiParameter.PATH,
                description="the key's fingerprint, e.g. 3f2a:91bc:07de:4411",
            )
        ],
        responses={200: OpenApiResponse(KEY_SCHEMA), **_errors(400, 401, 403, 404, 409)},
    )
    def delete(self, request: Request, fingerprint: str) -> Response:
        gone = trust.remove(fingerprint)  # refusals: errors.py (DOMAIN_ERRORS)
        runs = RunOrigin.objects.filter(origin_key=gone["public_key"]).count()
        return Response({**gone, "runs": runs})
