"""/api/ routes of a run's and a series' results for others to check: MLPerf-format logs
and plots (result_views.py). Each answers with or without the trailing slash, like the
other routes (urls.py); the schema lists the form with the slash. A chart reads best
without it: /api/runs/7/plots/accuracy.svg."""

from django.urls import re_path

from mlbench_master.api import result_views

PK = r"(?P<pk>[0-9]{1,18})"
CHART = r"(?P<chart>[A-Za-z0-9_-]{1,40})\.(?P<fmt>[A-Za-z0-9]{1,10})"


def both(route: str, view, name: str) -> list:  # noqa: ANN001
    """`route/` and `route` (as urls.both; not imported from there: urls imports us)."""
    return [re_path(rf"^{route}/$", view, name=name), re_path(rf"^{route}$", view)]


urlpatterns: list = [
    *both(rf"runs/{PK}/mllog", result_views.RunMllog.as_view(), "run-mllog"),
    *both(rf"series/{PK}/mllog", result_views.SeriesMllog.as_view(), "series-mllog"),
    *both(rf"runs/{PK}/plots/{CHART}", result_views.RunPlot.as_view(), "run-plot"),
    *both(rf"series/{PK}/plots/{CHART}", result_views.SeriesPlot.as_view(), "series-plot"),
]
