"""/api/ routes. Each endpoint also answers without its trailing slash (the seeds write
`POST /api/metrics`), because a redirect would lose a POST body; the schema lists only the
canonical form."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from mlbench_master.api import (
    algorithm_views,
    board_views,
    bundle_views,
    model_upload,
    predictions,
    prices,
    result_urls,
    series_views,
    study_views,
    trust_views,
    views,
)


def both(route: str, view, name: str) -> list:  # noqa: ANN001
    """`route/` and `route` (regex routes, no trailing slash in `route`)."""
    return [re_path(rf"^{route}/$", view, name=name), re_path(rf"^{route}$", view)]


app_name = "api"
urlpatterns = [
    *both("pods", views.PodList.as_view(), "pods"),
    *both("metrics", views.MetricList.as_view(), "metrics"),
    *both(r"metrics/(?P<pod_name_or_run_id>[^/]+)", views.MetricDetail.as_view(), "metric-detail"),
    *both("runs", views.RunList.as_view(), "runs"),
    *both("runs/defaults", views.RunDefaults.as_view(), "run-defaults"),
    *both("runs/bundle", bundle_views.RunsBundle.as_view(), "runs-bundle"),
    *both(r"runs/(?P<pk>[0-9]{1,18})/bundle", bundle_views.RunBundle.as_view(), "run-bundle"),
    *both(r"runs/(?P<pk>[0-9]{1,18})", views.RunDetail.as_view(), "run-detail"),
    *both(r"runs/(?P<pk>[0-9]{1,18})/summary", views.RunSummary.as_view(), "run-summary"),
    *both(r"runs/(?P<pk>[0-9]{1,18})/logs", views.RunLogs.as_view(), "run-logs"),
    *both(
        r"runs/(?P<pk>[0-9]{1,18})/predictions",
        predictions.RunPredictions.as_view(),
        "run-predictions",
    ),
    *both(
        r"runs/(?P<pk>[0-9]{1,18})/predictions/(?P<step>[0-9]{1,10})",
        predictions.RunPrediction.as_view(),
        "run-prediction",
    ),
    *both(r"runs/(?P<pk>[0-9]{1,18})/model", model_upload.RunModel.as_view(), "run-model"),
    *both("algorithms", algorithm_views.Algorithms.as_view(), "algorithms"),
    *both(
        r"algorithms/(?P<sha256>[0-9a-f]{64})",
        algorithm_views.AlgorithmSource.as_view(),
        "algorithm-source",
    ),
    *both("series", series_views.SeriesList.as_view(), "series"),
    *both(r"series/(?P<pk>[0-9]{1,18})", series_views.SeriesDetail.as_view(), "series-detail"),
    *both(
        r"series/(?P<pk>[0-9]{1,18})/cancel", series_views.SeriesCancel.as_view(), "series-cancel"
    ),
    *both("studies", study_views.StudyList.as_view(), "studies"),
    *both(r"studies/(?P<pk>[0-9]{1,18})", study_views.StudyDetail.as_view(), "study-detail"),
    *both(r"studies/(?P<pk>[0-9]{1,18})/cancel", study_views.StudyCancel.as_view(), "study-cancel"),
    *both(
        r"studies/(?P<pk>[0-9]{1,18})/bundle", bundle_views.StudyBundle.as_view(), "study-bundle"
    ),
    *both("prices", prices.PriceList.as_view(), "prices"),
    *both(r"prices/(?P<pk>[0-9]{1,18})", prices.PriceDetail.as_view(), "price-detail"),
    *both(
        r"series/(?P<pk>[0-9]{1,18})/bundle", bundle_views.SeriesBundle.as_view(), "series-bundle"
    ),
    *both("bundles", bundle_views.Bundles.as_view(), "bundles"),
    *both("installation", bundle_views.Installation.as_view(), "installation"),
    *both("results", board_views.Results.as_view(), "results"),
    *both("results/algorithms", board_views.AlgorithmResults.as_view(), "results-algorithms"),
    *both("trust", trust_views.TrustList.as_view(), "trust"),
    *both(r"trust/(?P<fingerprint>[^/]+)", trust_views.TrustDetail.as_view(), "trust-detail"),
    *result_urls.urlpatterns,
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    # Last: anything else under /api/ (an unknown path, a run id that is not a number)
    # answers a JSON 404 like the rest of the API, never the HTML page.
    re_path(r"^.*$", views.not_found),
]
