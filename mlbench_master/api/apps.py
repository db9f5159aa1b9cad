"""App configuration of the REST API."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "mlbench_master.api"
    label = "api"
    verbose_name = "mlbench API"
    default_auto_field = "django.db.models.BigAutoField"
