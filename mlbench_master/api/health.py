"""GET /api/health/: is this master process able to serve? (the helm chart's probes).

200 {"status": "ok", "database": "ok"} when the database answers, 503 with the database's
error otherwise. A plain Django view: no authentication, no session, nothing to leak.

With `?cluster=1` it also says which cluster driver the master uses and what keeps it
from running workers (`cluster_problems`: bad settings, an unreachable scheduler; the
Workers page shows them). Only on request, so the chart's probes never wait on a
scheduler; the answer is kept CLUSTER_CACHE_SECONDS. Problems do not make it 503: the
master still serves every run it has.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from mlbench_master.cluster.drivers import driver_problems


@csrf_exempt  # it changes nothing; a POST gets the JSON 405 below, not the CSRF page
def health(request: HttpRequest) -> JsonResponse:
    if request.method not in ("GET", "HEAD"):
        response = JsonResponse({"detail": f'method "{request.method}" not allowed'}, status=405)
        response["Allow"] = "GET, HEAD"
        return response
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # any database failure makes this master not ready
        return JsonResponse(
            {"status": "unavailable", "database": f"{type(error).__name__}: {error}"[:300]},
            status=503,
        )
    body: dict[str, object] = {"status": "ok", "database": "ok"}
    if request.GET.get("cluster") in ("1", "true", "yes"):
        body.update(cluster=settings.MLBENCH_CLUSTER, cluster_problems=cluster_problems())
    return JsonResponse(body)


CLUSTER_CACHE_SECONDS = 15.0
_cached: tuple[float, list[str]] = (-CLUSTER_CACHE_SECONDS, [])


def cluster_problems() -> list[str]:
    """The driver's problems (cluster.drivers.driver_problems), asked at most every
    CLUSTER_CACHE_SECONDS by this process."""
    global _cached
    if time.monotonic() - _cached[0] >= CLUSTER_CACHE_SECONDS:
        _cached = (time.monotonic(), driver_problems())
    return list(_cached[1])
