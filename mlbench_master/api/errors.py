"""One error shape for the whole API, and no 500 for anything a client sends.

Every error answers JSON `{"detail": "<one sentence naming the field and the problem>",
"errors": {"<field>": ["<message>", ...]}}` (`errors` only for invalid input).

This is also the one place that decides which status an error of the domain gets
(`DOMAIN_ERRORS`): the views let the run rules', the lifecycle's and the charts' errors
pass, so a status and its wording cannot differ between two endpoints that raise the same
error (POST /api/runs/ and POST /api/series/ both refuse runs).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from mlbench_master import run_rules
from mlbench_master.bundles import refusals, trust
from mlbench_master.grading import receive, scoring
from mlbench_master.runs import frozen, lifecycle
from mlbench_worker.shared import plots
from mlbench_worker.shared.evaluation.model_audit import ModelRefused
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

log = logging.getLogger(__name__)

# What each error status means in the schema; an endpoint may say it more exactly (`text`).
ERROR_TEXT = {
    400: "invalid input (the message names the field)",
    401: "no or invalid token",
    403: "not allowed with these credentials",
    404: "no such object",
    409: "conflict with the current state",
    413: "too many points in one request",
    503: "Redis unreachable",
}


def error_responses(*codes: int, text: dict[int, str] | None = None) -> dict:
    """The schema's responses for these error statuses, all in the one error shape."""
    from mlbench_master.api.serializers import ErrorSerializer  # it imports this module

    words = {**ERROR_TEXT, **(text or {})}
    return {c: OpenApiResponse(ErrorSerializer, description=words[c]) for c in codes}


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "conflict with the current state"
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request too large"
    default_code = "too_large"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "a service the master needs is unavailable"
    default_code = "unavailable"


def invalid(field: str, message: str) -> exceptions.ValidationError:
    """A 400 naming `field` (use as `raise invalid("since", "...")`)."""
    return exceptions.ValidationError({field: [message]})


# Each error the domain raises that a client caused or must know about, and what the API
# answers for it. Checked in this order, before the generic rules below (several of these
# are ValueErrors, which would otherwise become a 400 without the field's name).
DOMAIN_ERRORS: tuple[tuple[type[Exception], Callable[[Any], exceptions.APIException]], ...] = (
    # 400 naming every field whose rule the request breaks
    (run_rules.RunRefused, lambda exc: exceptions.ValidationError(exc.errors)),
    # 400: the run to resume changed between the check and the store (deleted meanwhile)
    (run_rules.ResumeRefused, lambda exc: invalid("resume_from", str(exc))),
    # 403: a field only staff users may set
    (run_rules.StaffOnly, lambda exc: exceptions.PermissionDenied(str(exc))),
    # 409: another run is active or runs wait in the queue
    (lifecycle.RunConflict, lambda exc: Conflict(str(exc))),
    # 503: Redis refused the run's job; lifecycle.enqueue_run stored the run as FAILED first
    (
        lifecycle.QueueUnavailable,
        lambda exc: ServiceUnavailable(
            f"{exc}; the run was stored as FAILED. Start Redis (REDIS_URL) and try again."
        ),
    ),
    # 409: a change to a run imported from another installation; 403: deleting one, not staff
    (
        lifecycle.ReadOnlyRun,
        lambda exc: exceptions.PermissionDenied(str(exc)) if exc.staff_may else Conflict(str(exc)),
    ),
    # 409: the data cannot give the chart yet (the message says what is missing)
    (plots.PlotError, lambda exc: Conflict(str(exc))),
    # 400: predictions the evaluator refuses (its message), or a test set the run cannot
    # have (the parameter named); 413: a predictions file over its cap
    (PredictionsRefused, lambda exc: invalid("predictions", str(exc))),
    (scoring.SetRefused, lambda exc: invalid(exc.field, exc.message)),
    # 413: any upload over its cap (grading/receive.py, the one bounded reader)
    (receive.TooLarge, lambda exc: PayloadTooLarge(str(exc))),
    # 400 naming the member or the signature of a refused bundle (409: runs of this
    # installation); 409: runs that cannot be exported; 413: a bundle over its cap
    (
        refusals.BundleRefused,
        lambda exc: (
            Conflict(str(exc))
            if isinstance(exc, refusals.AlreadyHere)
            else invalid("bundle", str(exc))
        ),
    ),
    (refusals.NotExportable, lambda exc: Conflict(str(exc))),
    # 400: a model the audit refuses (it does not load, or does not fit the task)
    (ModelRefused, lambda exc: invalid("model", str(exc))),
    # 409: a write the run's frozen results refuse (a replacing file, a grade after the end)
    (frozen.Frozen, lambda exc: Conflict(str(exc))),
    # the trusted keys: 400 naming the field, 404 no such key, 409 not possible as things are
    (trust.TrustRefused, lambda exc: _trust_refusal(exc)),
)


def _trust_refusal(exc: trust.TrustRefused) -> exceptions.APIException:
    if isinstance(exc, trust.NoSuchKey):
        return exceptions.NotFound(f"{exc.field}: {exc.message}")
    if isinstance(exc, trust.TrustUnchanged):
        return Conflict(f"{exc.field}: {exc.message}")
    return invalid(exc.field, exc.message)


def api_error(exc: Exception) -> Exception:
    """The API error `exc` stands for when it is one of DOMAIN_ERRORS, else `exc`."""
    for kind, answer in DOMAIN_ERRORS:
        if isinstance(exc, kind):
            return answer(exc)
    return exc


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = key if key != "non_field_errors" else ""
            sub = f"{prefix}.{name}" if prefix and name else (prefix or name)
            for k, v in _flatten(value, sub).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list):
        if all(not isinstance(d, (dict, list)) for d in detail):
            out.setdefault(prefix, []).extend(str(d) for d in detail)
        else:
            for i, item in enumerate(detail):
                for k, v in _flatten(item, f"{prefix}[{i}]").items():
                    out.setdefault(k, []).extend(v)
    else:
        out.setdefault(prefix, []).append(str(detail))
    return out


def _sentence(errors: dict[str, list[str]]) -> str:
    parts = [f"{field}: {msgs[0]}" if field else msgs[0] for field, msgs in errors.items() if msgs]
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


# Django's get_object_or_404 says "No Run matches the given query.": which run is missing
# is the client's own id, which the answer names instead.
_NO_MATCH = re.compile(r"^No (\w+) matches the given query\.$")


def _not_found(message: str, context: dict) -> str:
    found = _NO_MATCH.match(message)
    pk = (context.get("kwargs") or {}).get("pk")
    if found and pk is not None:
        return f"{found.group(1).lower()} {pk} does not exist"
    return message or "not found"


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler with our JSON shape: the domain's errors get their status
    (DOMAIN_ERRORS); database rejections of client data become 400, a database that does
    not answer 503."""
    exc = api_error(exc)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        )
    elif isinstance(exc, DataError):
        log.info("database rejected client data: %s", exc)
        exc = exceptions.ValidationError({"": [f"a value is out of range or too long ({exc})"]})
    elif isinstance(exc, IntegrityError):
        log.info("database integrity conflict: %s", exc)
        exc = Conflict(
            "the data conflicts with what is stored (was the run deleted meanwhile?): "
            f"{str(exc).splitlines()[0]}"
        )
    elif isinstance(exc, (OperationalError, InterfaceError)):
        # The database went away (a restart, a failover): nothing the client sent is wrong,
        # and the same request works once it is back, which a 503 says.
        log.warning("database unavailable: %s", exc)
        exc = ServiceUnavailable("the database does not answer; try again shortly")
    elif isinstance(exc, RecursionError):
        exc = exceptions.ParseError("the JSON body is nested too deeply")
    elif isinstance(exc, (ValueError, OverflowError, UnicodeError)):
        log.info("bad client value: %s", exc)
        exc = exceptions.ValidationError({"": [str(exc)]})
    elif isinstance(exc, SuspiciousOperation):
        exc = exceptions.ValidationError({"": [str(exc) or "request rejected"]})
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(_not_found(str(exc), context))
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        response.data = {"detail": _sentence(errors), "errors": errors}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"])}
    else:
        response.data = {"detail": str(response.data)}
    return response
