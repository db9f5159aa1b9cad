"""Django app configuration for the dashboard."""

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "mlbench_master.dashboard"
    label = "dashboard"
    verbose_name = "mlbench dashboard"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the check)
