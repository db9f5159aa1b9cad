"""/api/schema/ documents every endpoint; /api/docs/ serves the UI from installed files;
docs/api.rst names every path, parameter and status code of the schema; and
docs/openapi.yaml is the schema as generated now."""

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _schema(api):
    r = api.get("/api/schema/?format=json", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert r.status_code == 200
    return r.json()


def _api_routes() -> set[str]:
    """Every canonical /api/ route of the URLconf, as an OpenAPI path."""
    import re

    out = set()

    def walk(patterns, prefix):
        for p in patterns:
            route = str(p.pattern).lstrip("^").rstrip("$")
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + route)
            elif isinstance(p, URLPattern):
                full = "/" + prefix + route
                if full.startswith("/api/") and full.endswith("/"):
                    full = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", full).replace("\\.", ".")
                    out.add(full.replace("{pk}", "{id}"))  # spectacular names pk "id"

    walk(get_resolver().url_patterns, "")
    # the schema and its viewers, and the plain health probe (no REST resource)
    return out - {"/api/schema/", "/api/docs/", "/api/redoc/", "/api/health/"}


def test_every_route_is_in_the_schema(api):
    schema = _schema(api)
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == _api_routes()
    expected = {
        "/api/pods/": {"get"},
        "/api/metrics/": {"get", "post"},
        "/api/metrics/{pod_name_or_run_id}/": {"get"},
        "/api/runs/": {"get", "post"},
        "/api/runs/defaults/": {"get"},
        "/api/runs/{id}/": {"get", "delete"},
        "/api/runs/{id}/summary/": {"post"},
        "/api/runs/{id}/logs/": {"get"},
        "/api/series/": {"get", "post"},
        "/api/series/{id}/": {"get", "delete"},
        "/api/series/{id}/cancel/": {"post"},
        "/api/runs/{id}/mllog/": {"get"},
        "/api/series/{id}/mllog/": {"get"},
        "/api/runs/{id}/plots/{chart}.{fmt}/": {"get"},
        "/api/series/{id}/plots/{chart}.{fmt}/": {"get"},
    }
    assert {p: set(ops) - {"parameters"} for p, ops in schema["paths"].items()} == expected
    detail = schema["paths"]["/api/metrics/{pod_name_or_run_id}/"]["get"]
    names = {p["name"] for p in detail["parameters"]}
    assert {"since", "metric_type", "summarize", "last_n", "metric_filter", "format"} <= names
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert {"401", "403"} <= set(op["responses"]), (path, method)
    assert "runToken" in schema["components"]["securitySchemes"]
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_docs_ui_is_served_without_a_cdn(api, client):
    r = api.get("/api/docs/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "swagger" in html.lower() and "cdn" not in html.lower()
    assert "/static/drf_spectacular_sidecar/" in html
    from django.contrib.staticfiles import finders

    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert finders.find(f"drf_spectacular_sidecar/swagger-ui-dist/{asset}"), asset


def test_docs_api_rst_covers_the_schema(api):
    text = (DOCS / "api.rst").read_text()
    schema = _schema(api)
    for path, ops in schema["paths"].items():
        shown = path.replace("{pod_name_or_run_id}", "<pod_name_or_run_id>").replace("{id}", "<id>")
        for method, op in ops.items():
            assert f"{method.upper()} {shown}" in text, f"docs/api.rst lacks {method} {shown}"
            for param in op.get("parameters", []):
                if param["in"] == "query":
                    assert f"``{param['name']}``" in text, f"{path}: {param['name']}"
            for code in op["responses"]:
                assert code in text


def test_openapi_yaml_is_current(tmp_path):
    out = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(out), "--validate", "--fail-on-warn")
    committed = DOCS / "openapi.yaml"
    assert yaml.safe_load(out.read_text()) == yaml.safe_load(committed.read_text()), (
        "docs/openapi.yaml is stale: run `python manage.py spectacular --file docs/openapi.yaml`"
    )
