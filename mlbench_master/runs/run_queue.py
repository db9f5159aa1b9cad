"""The master's queue, read: which QUEUED runs wait and in what order. One rule for the
lifecycle (runs.start_next takes the first) and for what the API shows (each run's place),
kept here so the serializers need not import the lifecycle."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from mlbench_master.api.models import Run


def queued_runs() -> QuerySet[Run]:
    """QUEUED runs in the order they start (first asked, first run), less those of a
    cancelled series (their cancellation is under way)."""
    return (
        Run.objects.filter(state=Run.QUEUED)
        .filter(Q(series__isnull=True) | Q(series__cancelled_at__isnull=True))
        .order_by("id")
    )


def queue_positions() -> dict[int, int]:
    """run id -> its place in the queue (1: it starts when the active run ends)."""
    return {pk: place for place, pk in enumerate(queued_runs().values_list("pk", flat=True), 1)}


def queue_position(run: Run, memo: dict[str, Any]) -> int | None:
    """A QUEUED run's place in the queue (1: next), None for any other run (and for a
    queued run of a cancelled series, which is leaving the queue). The queue is read once
    per `memo` (a serializer's context: once per response, not once per run)."""
    if run.state != Run.QUEUED:
        return None
    if "queue_positions" not in memo:
        memo["queue_positions"] = queue_positions()
    return memo["queue_positions"].get(run.pk)
