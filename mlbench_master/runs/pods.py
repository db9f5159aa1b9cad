"""The stored list of worker pods, kept in step with the cluster driver."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from mlbench_master.api.models import Pod
from mlbench_master.cluster import drivers

log = logging.getLogger(__name__)
_last_attempt = 0.0  # monotonic time of this process's last driver query


def sync_pods(infos: Iterable) -> None:
    """Store the driver's pods (`cluster.base.PodInfo`): update, add, and forget the
    vanished ones (their metrics stay: metrics keep the pod's name as text)."""
    now = timezone.now()
    infos = list(infos)
    with transaction.atomic():
        for info in infos:
            Pod.objects.update_or_create(
                name=info.name,
                defaults={
                    "labels": dict(info.labels),
                    "phase": info.phase,
                    "ip": info.ip or "",
                    "node": info.node or "",
                    "last_seen": now,
                },
            )
        Pod.objects.exclude(name__in=[i.name for i in infos]).delete()


def refresh_if_stale() -> None:
    """Ask the driver again when the stored list is older than MLBENCH_PODS_REFRESH_SECONDS.

    A driver failure is logged and the stored list served: the page must still load.
    """
    global _last_attempt
    max_age = settings.MLBENCH_PODS_REFRESH_SECONDS
    if max_age <= 0 or time.monotonic() - _last_attempt < max_age:
        return
    _last_attempt = time.monotonic()
    newest = Pod.objects.aggregate(m=Max("last_seen"))["m"]
    if newest is not None and (timezone.now() - newest).total_seconds() < max_age:
        return
    try:
        sync_pods(drivers.get_driver().pods())
    except Exception as exc:
        log.warning("could not list pods from the cluster driver: %s", exc)
