"""/api/health/, the endpoint the chart's readiness probe asks."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_health_answers_ok_when_the_database_does(client):
    response = client.get("/api/health/", HTTP_HOST="localhost")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_health_is_503_with_the_reason_when_the_database_is_down(client, monkeypatch):
    from django.db import connection

    def broken():
        raise RuntimeError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken)
    response = client.get("/api/health/", HTTP_HOST="localhost")
    assert response.status_code == 503
    assert "connection refused" in response.json()["database"]
    assert client.post("/api/health/", HTTP_HOST="localhost").status_code == 405
