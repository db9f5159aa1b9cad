"""Who may do what.

- Reads: any logged-in user; anonymous clients too when MLBENCH_PUBLIC_READ=true.
- Writes: users (token or session with CSRF), with two exceptions that decide what the
  published results are, and so must not be forgeable by any account:
  - metric points (`POST /api/metrics/`): a run's points only from that run's worker token
    or a staff user; pod points only from staff (the master's own collector writes them
    through the ORM, not over HTTP);
  - a run's summary (`POST /api/runs/<id>/summary/`): only from that run's worker token or
    a staff user, and only while the run is active or within MLBENCH_RUN_TOKEN_GRACE
    seconds after it ended (see `auth.ended_past_grace`);
  - a run's predictions (`POST /api/runs/<id>/predictions/`), which the platform grades:
    as metric points, that run's worker token or a staff user.
- A run's worker token may only post metrics, predictions and the summary of its own run,
  and read its predictions back. The permission classes admit it for those methods; the
  views check the target run (`check_worker_run`), because only they know it.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions, permissions

from mlbench_master.api.auth import RunWorker

WORKER_ONLY = (
    "a worker token may only post metrics, predictions, the model and the summary of its run"
)


def is_worker(request) -> bool:  # noqa: ANN001
    return isinstance(request.user, RunWorker)


def is_staff(request) -> bool:  # noqa: ANN001
    user = request.user
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def check_worker_run(request, run_id: int, what: str, verb: str = "post") -> None:  # noqa: ANN001
    """403 unless a worker-token request targets the token's own run (users pass)."""
    if is_worker(request) and request.auth.pk != run_id:
        raise exceptions.PermissionDenied(
            f"the worker token of run {request.auth.pk} may not {verb} {what} of run {run_id}"
        )


def _authenticated(request) -> bool:  # noqa: ANN001
    return bool(request.user and request.user.is_authenticated)


def _read_allowed(request) -> bool:  # noqa: ANN001
    return request.method in permissions.SAFE_METHODS and (
        settings.MLBENCH_PUBLIC_READ or _authenticated(request)
    )


class ReadPublicOrUser(permissions.BasePermission):
    """Reads for users (or everyone when public); writes for users only."""

    message = "this needs a user token (Authorization: Token <key>) or a logged-in session"

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = WORKER_ONLY
            return False
        if request.method in permissions.SAFE_METHODS and settings.MLBENCH_PUBLIC_READ:
            return True
        return _authenticated(request)


class _WorkerOrStaffWrites(permissions.BasePermission):
    """Reads as `ReadPublicOrUser`; POSTs from a worker token (the view then checks its
    run) or a staff user. Other users get 403 naming what they would need."""

    message = ReadPublicOrUser.message
    refused = ""

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = WORKER_ONLY
            return request.method == "POST"
        if request.method in permissions.SAFE_METHODS:
            return _read_allowed(request)
        if not _authenticated(request):
            return False  # DRF answers 401 (not authenticated)
        if is_staff(request):
            return True
        self.message = f"{self.refused}; user {request.user.get_username()!r} is not staff"
        return False


class MetricWriters(_WorkerOrStaffWrites):
    """GET /api/metrics/ for readers; POST from worker tokens (own run) and staff."""

    refused = (
        "metric points of a run may only be posted with that run's worker token "
        "(MLBENCH_RUN_TOKEN) or by a staff user, pod metrics only by a staff user"
    )


class SummaryWriters(_WorkerOrStaffWrites):
    """POST /api/runs/<id>/summary/ from the run's worker token or staff."""

    refused = (
        "a run's summary may only be posted with that run's worker token "
        "(MLBENCH_RUN_TOKEN) or by a staff user"
    )


class PredictionsAccess(_WorkerOrStaffWrites):
    """POST /api/runs/<id>/predictions/ as metric points (the run's worker token, staff);
    reads for readers and for the run's own worker token (the view checks its run)."""

    refused = (
        "a run's predictions may only be posted with that run's worker token "
        "(MLBENCH_RUN_TOKEN) or by a staff user"
    )

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request) and request.method in ("GET", "HEAD"):
            return True
        return super().has_permission(request, view)


class PriceWriters(permissions.BasePermission):
    """The price table: read as the rest (`ReadPublicOrUser`), changed by staff only: a
    price decides what every later run is said to cost."""

    message = ReadPublicOrUser.message

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = WORKER_ONLY
            return False
        if request.method in permissions.SAFE_METHODS:
            return _read_allowed(request)
        if not _authenticated(request):
            return False  # DRF answers 401 (not authenticated)
        if is_staff(request):
            return True
        self.message = (
            f"the price table may only be changed by a staff user; user "
            f"{request.user.get_username()!r} is not staff"
        )
        return False


class ModelAccess(PredictionsAccess):
    """POST /api/runs/<id>/model/ (the run's worker token, staff); reads as predictions'."""

    refused = (
        "a run's model may only be posted with that run's worker token "
        "(MLBENCH_RUN_TOKEN) or by a staff user"
    )
