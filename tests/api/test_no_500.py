"""Nothing a client sends produces a 500: odd bodies, odd parameters, odd paths each get the
one answer the API gives for them (a 400 names the field where the API knows it)."""

import pytest

from mlbench_master.api.models import Metric

pytestmark = pytest.mark.django_db

# (body, the field the 400 names, or None and a part of the detail where the API names none)
BODIES = [
    # nesting deeper than the JSON parser's recursion limit (errors.py: RecursionError)
    ("[" * 50000, None, "the JSON body is nested too deeply"),
    ('{"run_id": 1, "name": "a", "value": 1e400}', "value", "must be a finite number"),
    # Python's reader makes 1e400 infinite; the store's writer would have made it null
    (
        '{"pod_name": "w", "name": "a", "value": 1, "metadata": {"a": [1, {"b": -1e400}]}}',
        "metadata",
        "finite numbers only",
    ),
    ('{"pod_name": "\\u0000", "name": "a", "value": 1}', "pod_name", "NUL characters"),
    # a lone surrogate: PostgreSQL's json refuses it on the insert (errors.py: DataError, no
    # field named)
    (
        '{"pod_name": "w", "name": "a", "value": 1, "metadata": {"a": "\\ud800"}}',
        None,
        "surrogate",
    ),
    (
        '{"run_id": 99999999999999999999999, "name": "a", "value": 1}',
        "run_id",
        "must be the integer id of a run",
    ),
    ("\xff\xfe", None, "JSON parse error"),  # valid UTF-8 ("ÿþ"), no JSON
]


@pytest.mark.parametrize(("body", "field", "words"), BODIES)
def test_odd_metric_bodies(staff_api, body, field, words):
    r = staff_api.post(
        "/api/metrics/", body.encode("utf-8", "surrogatepass"), content_type="application/json"
    )
    assert r.status_code == 400, (r.status_code, r.content[:200])
    detail = r.json()["detail"]
    assert words in detail, detail
    if field is not None:
        assert detail.startswith(f"{field}: ") and list(r.json()["errors"]) == [field], r.json()
    assert not Metric.objects.exists()


# (path with {run} for the run fixture's id, status, the field a 400 names or None, and a
# part of the detail of an error / the JSON of a 200, a function of the run where it names it)
READS = [
    # a NUL in a pod name: PostgreSQL refuses it in the query (errors.py: ValueError, a 400
    # that names no field)
    ("/api/metrics/a%00b/", 400, None, "cannot contain NUL"),
    ("/api/metrics/w/?since=0001-01-01T00:00:00Z", 200, None, {}),
    ("/api/metrics/w/?since=9999-12-31T23:59:59.999999%2B14:00", 200, None, {}),
    ("/api/metrics/w/?metric_filter=a%00", 400, "metric_filter", "comma-separated"),
    (
        "/api/metrics/999999999999999999/?metric_type=run",
        404,
        None,
        "run 999999999999999999 does not exist",
    ),
    ("/api/runs/999999999999999999/", 404, None, "run 999999999999999999 does not exist"),
    # a rank no worker has (int() takes it whole; the lookup finds no chunk): an empty page
    (
        "/api/runs/{run}/logs/?rank=99999999999999999999",
        200,
        None,
        lambda run: {
            "run_id": run.pk,
            "offset": 0,
            "next_offset": 0,
            "truncated": False,
            "chunks": [],
        },
    ),
    ("/api/runs/{run}/logs/?offset=99999999999999999999999", 400, "offset", "at least 0"),
]


@pytest.mark.parametrize(("path", "status", "field", "expected"), READS)
def test_odd_reads(api, run, path, status, field, expected):
    r = api.get(path.format(run=run.pk))
    assert r.status_code == status, (r.status_code, r.content[:200])
    body = r.json()
    if status == 200:
        assert body == (expected(run) if callable(expected) else expected)
        return
    assert expected in body["detail"], body
    if field is not None:
        assert body["detail"].startswith(f"{field}: ") and list(body["errors"]) == [field], body


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
