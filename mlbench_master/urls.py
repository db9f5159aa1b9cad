"""URL routes of the master."""

from django.urls import include, path

from mlbench_master.health import health

urlpatterns: list = [
    # Liveness/readiness of this master (the helm chart's probes); not part of the REST API.
    path("api/health/", health, name="health"),
    # The REST API, its OpenAPI schema (/api/schema/) and docs (/api/docs/).
    path("api/", include("mlbench_master.api.urls")),
    # The dashboard's pages (/, /runs/, /compare/, /login/ ...); they read data from /api/.
    path("", include("mlbench_master.dashboard.urls")),
]
