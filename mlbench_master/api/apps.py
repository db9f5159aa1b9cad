"""App configuration of the REST API."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ApiConfig(AppConfig):
    name = "mlbench_master.api"
    label = "api"
    verbose_name = "mlbench API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mlbench_master.api import schema  # noqa: F401  (registers the OpenAPI extension)

        post_migrate.connect(_signing_key, sender=self)


def _signing_key(**kwargs) -> None:  # noqa: ANN003 - Django's signal arguments
    """The installation's signing key is made at install: by the migrate step (the embedded
    master's first start, the chart's init container), or checked there when it is given."""
    from mlbench_master.bundles import signing  # reaches the tables: loaded after this app

    signing.ensure_key()
