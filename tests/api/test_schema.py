"""/api/schema/ documents every endpoint; /api/docs/ serves the UI from installed files;
docs/api.rst has one section per operation of the schema, naming its query parameters and
listing exactly its status codes; and
docs/openapi.yaml is the schema as generated now."""

import re
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
        "/api/runs/{id}/predictions/": {"get", "post"},
        "/api/runs/{id}/predictions/{step}/": {"get"},
        "/api/runs/{id}/model/": {"get", "post"},
        "/api/series/": {"get", "post"},
        "/api/series/{id}/": {"get", "delete"},
        "/api/series/{id}/cancel/": {"post"},
        "/api/studies/": {"get", "post"},
        "/api/studies/{id}/": {"get"},
        "/api/studies/{id}/cancel/": {"post"},
        "/api/runs/{id}/mllog/": {"get"},
        "/api/series/{id}/mllog/": {"get"},
        "/api/runs/{id}/plots/{chart}.{fmt}/": {"get"},
        "/api/series/{id}/plots/{chart}.{fmt}/": {"get"},
        "/api/prices/": {"get", "post"},
        "/api/prices/{id}/": {"get", "put", "patch", "delete"},
        "/api/installation/": {"get"},
        "/api/runs/{id}/bundle/": {"get"},
        "/api/runs/bundle/": {"get"},
        "/api/series/{id}/bundle/": {"get"},
        "/api/studies/{id}/bundle/": {"get"},
        "/api/bundles/": {"get", "post"},
        "/api/results/": {"get"},
        "/api/results/algorithms/": {"get"},
        "/api/trust/": {"get", "post"},
        "/api/trust/{fingerprint}/": {"delete"},
        "/api/algorithms/": {"post"},
        "/api/algorithms/{sha256}/": {"get"},
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


# An endpoint's section of docs/api.rst: its heading at the start of a line ("GET
# /api/runs/<id>/", "``GET /api/runs/<id>/mllog/``", maybe "*(addition)*"), then every
# indented or blank line after it (the body of the definition list's item).
HEADING = re.compile(
    r"^(?:``)?(GET|POST|PUT|PATCH|DELETE) (/api/\S+?)(?:``)?(?: \*\(addition\)\*)?$"
)
RESPONSES = re.compile(r"Responses:(.*?)(?:\.\s|\.$|::)", re.S)


def endpoint_sections(text: str) -> dict[tuple[str, str], list[str]]:
    """(method, path as the docs write it) -> the text of each section with that heading."""
    sections: dict[tuple[str, str], list[str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        heading = HEADING.match(lines[i])
        i += 1
        if heading is None:
            continue
        body = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        sections.setdefault((heading[1], heading[2]), []).append("\n".join(body))
    return sections


def documented_responses(section: str) -> list[list[str]]:
    """The codes of each "Responses: ``200``, ``401`` ..." sentence of a section."""
    return [re.findall(r"``(\d{3})``", listed) for listed in RESPONSES.findall(section)]


def docs_problems(text: str, schema: dict) -> list[str]:
    """Where docs/api.rst and the schema disagree: an operation without exactly one
    section, a section with no operation, a query parameter its section does not name,
    a section whose one `Responses:` list is not the operation's status codes."""
    sections = endpoint_sections(text)
    problems = []
    operations = set()
    for path, ops in schema["paths"].items():
        shown = path.replace("{pod_name_or_run_id}", "<pod_name_or_run_id>")
        shown = shown.replace("{id}", "<id>")
        for method, op in ops.items():
            if method == "parameters":
                continue
            key = (method.upper(), shown)
            operations.add(key)
            found = sections.get(key, [])
            if len(found) != 1:
                problems.append(f"{key[0]} {key[1]}: {len(found)} sections, not 1")
                continue
            section = found[0]
            for param in op.get("parameters", []):
                if param["in"] == "query" and f"``{param['name']}``" not in section:
                    problems.append(f"{key[0]} {key[1]}: query parameter {param['name']}")
            listed = documented_responses(section)
            codes = sorted(op["responses"])
            if len(listed) != 1 or sorted(listed[0]) != codes:
                problems.append(f"{key[0]} {key[1]}: Responses {listed}, schema {codes}")
    for key in sorted(set(sections) - operations):
        problems.append(f"{key[0]} {key[1]}: documented, not in the schema")
    return problems


def test_docs_api_rst_covers_the_schema(api):
    text = (DOCS / "api.rst").read_text()
    problems = docs_problems(text, _schema(api))
    assert not problems, "docs/api.rst and the schema differ:\n" + "\n".join(problems)


def test_the_docs_check_finds_each_kind_of_drift(api):
    """docs_problems on the real page with one thing broken at a time."""
    text = (DOCS / "api.rst").read_text()
    schema = _schema(api)
    post_runs = "Responses: ``201``, ``400``, ``401``, ``403``, ``409``, ``503``."
    assert text.count(post_runs) == 1
    one_code_less = text.replace(post_runs, post_runs.replace(" ``409``,", ""))
    assert docs_problems(one_code_less, schema) == [
        "POST /api/runs/: Responses [['201', '400', '401', '403', '503']], schema "
        "['201', '400', '401', '403', '409', '503']"
    ]
    no_section = text.replace("\nDELETE /api/series/<id>/\n", "\nDELETE /api/series/<id>/ (gone)\n")
    assert docs_problems(no_section, schema) == ["DELETE /api/series/<id>/: 0 sections, not 1"]
    logs = "   ``stream``\n      ``stdout`` or ``stderr``."
    assert logs in text
    unnamed = text.replace(logs, "   stream\n      ``stdout`` or ``stderr``.")
    assert docs_problems(unnamed, schema) == ["GET /api/runs/<id>/logs/: query parameter stream"]
    extra = text + "\nGET /api/runs/<id>/gone/\n   Responses: ``200``.\n"
    assert docs_problems(extra, schema) == [
        "GET /api/runs/<id>/gone/: documented, not in the schema"
    ]


def test_openapi_yaml_is_current(tmp_path):
    out = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(out), "--validate", "--fail-on-warn")
    committed = DOCS / "openapi.yaml"
    assert yaml.safe_load(out.read_text()) == yaml.safe_load(committed.read_text()), (
        "docs/openapi.yaml is stale: run `python manage.py spectacular --file docs/openapi.yaml`"
    )
