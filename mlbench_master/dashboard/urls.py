"""Dashboard routes, included at "/" by mlbench_master/urls.py."""

from django.contrib.auth import views as auth_views
from django.urls import path

from . import actions, views

app_name = "dashboard"

urlpatterns = [
    path("", views.workers, name="workers"),
    path("workers/<str:name>/", views.worker_detail, name="worker-detail"),
    path("runs/", views.runs, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/cancel/", actions.RunCancel.as_view(), name="run-cancel"),
    path("series/", views.series_list, name="series"),
    path("series/<int:series_id>/", views.series_detail, name="series-detail"),
    path("studies/", views.studies, name="studies"),
    path("studies/<int:study_id>/", views.study_detail, name="study-detail"),
    path("compare/", views.compare, name="compare"),
    path("prices/", views.prices, name="prices"),
    path("bundles/", views.bundles, name="bundles"),
    path("trust/", views.trust, name="trust"),
    path("board/", views.board, name="board"),
    path("board/<str:task>/", views.board, name="board-task"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="dashboard/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("login/once/<str:token>/", views.login_once, name="login-once"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
