"""GET /api/health/: is this master process able to serve? (the helm chart's probes).

200 {"status": "ok", "database": "ok"} when the database answers, 503 with the database's
error otherwise. A plain Django view: no authentication, no session, nothing to leak.
"""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt


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
    return JsonResponse({"status": "ok", "database": "ok"})
