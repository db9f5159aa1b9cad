"""Who may do what.

- Reads: any logged-in user; anonymous clients too when MLBENCH_PUBLIC_READ=true.
- Writes: users (token or session with CSRF). A run's worker token may only post metrics
  of its own run and its summary (checked in the views, which know the target run).
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import permissions

from mlbench_master.api.auth import RunWorker


def is_worker(request) -> bool:  # noqa: ANN001
    return isinstance(request.user, RunWorker)


class ReadPublicOrUser(permissions.BasePermission):
    """Reads for users (or everyone when public); writes for users only."""

    message = "this needs a user token (Authorization: Token <key>) or a logged-in session"

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            self.message = "a worker token may only post metrics and the summary of its run"
            return False
        if request.method in permissions.SAFE_METHODS and settings.MLBENCH_PUBLIC_READ:
            return True
        return bool(request.user and request.user.is_authenticated)


class UserOrRunWorker(permissions.BasePermission):
    """Users, or a worker token (the view then checks the run it writes to)."""

    message = ReadPublicOrUser.message

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if is_worker(request):
            return request.method == "POST"
        if request.method in permissions.SAFE_METHODS and settings.MLBENCH_PUBLIC_READ:
            return True
        return bool(request.user and request.user.is_authenticated)
