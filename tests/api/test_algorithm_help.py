"""The API's description of a run's `algorithm` names every algorithm of the catalogue: the
help text is built from algorithm_catalogue.ALGORITHMS, so one added there (as diloco and
lbfgs were, after the help listed six by hand) appears in the live schema and in the
committed docs/openapi.yaml without anyone remembering to add it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from mlbench_worker.client.api import ApiClient
from mlbench_worker.shared import algorithm_catalogue

pytestmark = pytest.mark.django_db

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REQUESTS = ("RunCreateRequest", "SeriesCreateRequest")  # the bodies that take `algorithm`


def _missing(schema: dict) -> dict[str, list[str]]:
    """Per request body, the catalogue's algorithms its `algorithm` description leaves out."""
    found = {}
    for body in REQUESTS:
        words = schema["components"]["schemas"][body]["properties"]["algorithm"]["description"]
        words = " ".join(words.split())
        found[body] = [n for n in algorithm_catalogue.ALGORITHMS if f" {n}" not in words]
    return found


def test_the_live_schema_names_every_catalogue_algorithm(api):
    answer = api.get("/api/schema/?format=json", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert answer.status_code == 200
    assert _missing(answer.json()) == {body: [] for body in REQUESTS}


def test_the_committed_openapi_yaml_names_every_catalogue_algorithm():
    schema = yaml.safe_load(OPENAPI.read_text())
    assert _missing(schema) == {body: [] for body in REQUESTS}, (
        "docs/openapi.yaml is stale: run `python manage.py spectacular --file docs/openapi.yaml`"
    )


def test_the_clients_create_run_points_to_the_catalogue_instead_of_a_list():
    """A list in the docstring would go stale as the help text did; it names the source."""
    doc = " ".join(inspect.getdoc(ApiClient.create_run).split())
    assert "algorithm catalogue / GET /api/runs/defaults/" in doc
    assert "allreduce, powersgd" not in doc
