"""OpenAPI schema hooks (drf-spectacular)."""

from __future__ import annotations


def only_canonical_paths(endpoints: list, **kwargs: object) -> list:
    """Only the REST API under /api/ (not the dashboard's page helpers), and without the
    slash-less aliases (e.g. `POST /api/metrics` from the seed documents): the schema
    lists each endpoint once, at its canonical path ending in '/'."""
    return [e for e in endpoints if e[0].startswith("/api/") and e[0].endswith("/")]


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class RunTokenScheme(OpenApiAuthenticationExtension):
        """Documents the per-run worker token (same header as user tokens)."""

        target_class = "mlbench_master.api.auth.RunTokenAuthentication"
        name = "runToken"

        def get_security_definition(self, auto_schema: object) -> dict:
            return {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": "A run's worker token: `Token mlbr_<run id>_<hmac>`. It may only "
                "post metrics, predictions and the summary of that run, and read its "
                "predictions.",
            }

    class TokenBasicScheme(OpenApiAuthenticationExtension):
        """Documents HTTP Basic with an API token as the password (the original client)."""

        target_class = "mlbench_master.api.auth.TokenBasicAuthentication"
        name = "tokenBasic"

        def get_security_definition(self, auto_schema: object) -> dict:
            return {
                "type": "http",
                "scheme": "basic",
                "description": "User name and API token as the password (`user:TOKEN`); a "
                "worker token goes with the user name `run-<id>-worker`.",
            }

except ImportError:  # drf-spectacular is part of the master extra; keep imports safe
    pass
