"""The one write the dashboard needs that the REST API does not offer: cancelling a run while
keeping it (DELETE /api/runs/<id>/ cancels and deletes). It goes through DRF with the API's
own authentication, permissions and error shape, and through `lifecycle.cancel_run`, the
lifecycle's only way to cancel."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api.errors import Conflict
from mlbench_master.api.models import Run
from mlbench_master.api.serializers import RunSerializer
from mlbench_master.runs import lifecycle


class RunCancel(APIView):
    """POST /runs/<id>/cancel/: an active or queued run becomes CANCELLED; 409 otherwise."""

    def post(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(Run, pk=run_id)
        if not lifecycle.cancel_run(run, reason=f"cancelled by {request.user} in the dashboard"):
            raise Conflict(
                f"run {run.pk} is {run.state}; only an active or queued run can be cancelled"
            )
        return Response(RunSerializer(run).data)
