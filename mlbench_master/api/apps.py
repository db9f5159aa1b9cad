"""App configuration of the REST API."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "mlbench_master.api"
    label = "api"
    verbose_name = "mlbench API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mlbench_master.api import schema  # noqa: F401  (registers the OpenAPI extension)
