"""Nothing a client sends produces a 500: odd bodies, odd parameters, odd paths."""

import pytest

pytestmark = pytest.mark.django_db

BODIES = [
    "[" * 50000,  # nesting deeper than the JSON parser's recursion limit
    '{"run_id": 1, "name": "a", "value": 1e400}',
    '{"pod_name": "\\u0000", "name": "a", "value": 1}',
    '{"pod_name": "w", "name": "a", "value": 1, "metadata": {"a": "\\ud800"}}',
    '{"run_id": 99999999999999999999999, "name": "a", "value": 1}',
    "\xff\xfe",
]


@pytest.mark.parametrize("body", BODIES)
def test_odd_metric_bodies(staff_api, body):
    r = staff_api.post(
        "/api/metrics/", body.encode("utf-8", "surrogatepass"), content_type="application/json"
    )
    assert 400 <= r.status_code < 500, (r.status_code, r.content[:200])
    assert r.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/metrics/a%00b/",
        "/api/metrics/w/?since=0001-01-01T00:00:00Z",
        "/api/metrics/w/?since=9999-12-31T23:59:59.999999%2B14:00",
        "/api/metrics/w/?metric_filter=a%00",
        "/api/metrics/999999999999999999/?metric_type=run",
        "/api/runs/999999999999999999/",
        "/api/runs/1/logs/?rank=99999999999999999999",
        "/api/runs/1/logs/?offset=99999999999999999999999",
    ],
)
def test_odd_reads(api, run, path):
    r = api.get(path)
    assert r.status_code < 500, (r.status_code, r.content[:200])


def test_other_media_types_and_wrong_method(api, run):
    r = api.post("/api/runs/", "<run/>", content_type="application/xml")
    assert r.status_code == 415 and r.json()["detail"]
    r = api.put(f"/api/runs/{run.pk}/", {}, format="json")
    assert r.status_code == 405 and r.json()["detail"]


@pytest.mark.parametrize("path", ["/api/docs", "/api/schema", "/api/redoc", "/api/health"])
def test_pages_without_their_slash_are_redirected_not_lost(api, path):
    r = api.get(path, {"format": "json"})
    assert r.status_code == 301 and r["Location"] == f"{path}/?format=json"


def test_unknown_api_paths_are_json_404(api):
    for path in ("/api/nothing", "/api/runs/abc", "/api/runs/abc/"):
        r = api.get(path)
        assert r.status_code == 404 and r["Content-Type"] == "application/json"
        assert "/api/docs/" in r.json()["detail"]
