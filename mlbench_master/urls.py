"""URL routes of the master."""

from django.urls import include, path

urlpatterns: list = [
    # The dashboard's pages (/, /runs/, /compare/, /login/ ...); they read data from /api/.
    path("", include("mlbench_master.dashboard.urls")),
]
