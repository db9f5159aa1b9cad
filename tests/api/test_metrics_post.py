"""POST /api/metrics/: one object (seed) or a list; every bad input gives 400 naming it."""

import pytest

from mlbench_master.api.models import Metric

pytestmark = pytest.mark.django_db


def test_seed_example_for_a_pod(staff_api):
    # The seed's request, minus run_id: pod_name and run_id are mutually exclusive.
    body = {
        "pod_name": "quiet-mink-mlbench-worker-1",
        "name": "accuracy",
        "date": "2018-08-03T09:21:44.331823Z",
        "value": "0.7845",
        "cumulative": False,
        "metadata": "some additional data",
    }
    r = staff_api.post("/api/metrics", body, format="json")
    assert r.status_code == 201, r.json()
    assert r.json() == {**body, "value": 0.7845}
    m = Metric.objects.get()
    assert m.value == 0.7845 and isinstance(m.value, float)
    assert m.metadata == "some additional data" and m.run_id is None


def test_run_point_defaults(staff_api, run):
    r = staff_api.post(
        "/api/metrics/", {"run_id": run.pk, "name": "loss", "value": 2}, format="json"
    )
    assert r.status_code == 201
    body = r.json()
    assert body["run_id"] == run.pk and body["value"] == 2.0 and body["cumulative"] is False
    assert body["date"].endswith("Z")
    assert Metric.objects.get().run_id == run.pk


def test_batch_and_uid_deduplication(staff_api, run):
    points = [
        {"run_id": run.pk, "name": "loss", "value": i, "uid": f"p{i}", "metadata": {"step": i}}
        for i in range(100)
    ]
    assert staff_api.post("/api/metrics/", points, format="json").status_code == 201
    # a retried batch (overlapping uids) succeeds and stores nothing twice
    retry = points[50:] + [{"run_id": run.pk, "name": "loss", "value": 7, "uid": "new"}]
    r = staff_api.post("/api/metrics/", retry, format="json")
    assert r.status_code == 201 and r.json() == {"received": 51}
    assert Metric.objects.count() == 101
    # duplicates inside one batch are stored once too
    dup = [{"run_id": run.pk, "name": "x", "value": 1, "uid": "d"}] * 3
    assert staff_api.post("/api/metrics/", dup, format="json").status_code == 201
    assert Metric.objects.filter(uid="d").count() == 1


def test_limit_per_request(staff_api, run, settings):
    settings.MLBENCH_MAX_METRICS_PER_REQUEST = 10
    ok = [{"run_id": run.pk, "name": "a", "value": 1}] * 10
    assert staff_api.post("/api/metrics/", ok, format="json").status_code == 201
    r = staff_api.post("/api/metrics/", ok + ok[:1], format="json")
    assert r.status_code == 413
    assert "at most 10" in r.json()["detail"]
    assert Metric.objects.count() == 10


def test_ten_thousand_points_in_one_request(staff_api, run):
    points = [{"run_id": run.pk, "name": f"m{i % 10}", "value": i} for i in range(10000)]
    assert staff_api.post("/api/metrics/", points, format="json").status_code == 201
    assert Metric.objects.count() == 10000


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"pod_name": "w-0"}, "run_id", "exactly one of pod_name and run_id"),
        ({"run_id": None}, "run_id", "neither"),
        ({"value": "nan"}, "value", "finite"),
        ({"value": "inf"}, "value", "finite"),
        ({"value": "-Infinity"}, "value", "finite"),
        ({"value": "abc"}, "value", "finite"),
        ({"value": None}, "value", "finite"),
        ({"value": True}, "value", "finite"),
        ({"value": [1]}, "value", "finite"),
        ({"value": "1e999"}, "value", "finite"),
        ({"name": ""}, "name", "non-empty"),
        ({"name": 5}, "name", "non-empty"),
        ({"name": "x" * 201}, "name", "at most"),
        ({"name": "a\x00b"}, "name", "NUL"),
        ({"date": "yesterday"}, "date", "ISO 8601"),
        ({"date": 12345}, "date", "ISO 8601"),
        ({"cumulative": "maybe"}, "cumulative", "true or false"),
        ({"uid": ""}, "uid", "non-empty"),
        ({"uid": {"a": 1}}, "uid", "non-empty"),
        ({"run_id": "abc"}, "run_id", "integer id"),
        ({"run_id": -3}, "run_id", "integer id"),
    ],
)
def test_bad_points(staff_api, run, change, field, words):
    point = {"run_id": run.pk, "name": "loss", "value": 1.0, **change}
    r = staff_api.post("/api/metrics/", point, format="json")
    assert r.status_code == 400, r.json()
    body = r.json()
    assert field in body["errors"], body
    assert words in body["errors"][field][0]
    assert field in body["detail"]
    # in a list, the index is named too; nothing of the batch is stored
    good = {"run_id": run.pk, "name": "loss", "value": 1.0}
    r = staff_api.post("/api/metrics/", [good, point], format="json")
    assert r.status_code == 400 and f"[1].{field}" in r.json()["errors"]
    assert Metric.objects.count() == 0


def test_missing_value(staff_api, run):
    r = staff_api.post("/api/metrics/", {"run_id": run.pk, "name": "loss"}, format="json")
    assert r.status_code == 400 and "required" in r.json()["errors"]["value"][0]


def test_unknown_run_is_named(staff_api, run):
    r = staff_api.post("/api/metrics/", {"run_id": 987654, "name": "a", "value": 1}, format="json")
    assert r.status_code == 400
    assert "run 987654 does not exist" in r.json()["detail"]


@pytest.mark.parametrize(
    "body", ['"just a string"', "12", "null", "[1, 2]", "{not json", '{"a": NaN}']
)
def test_malformed_bodies(staff_api, body):
    r = staff_api.post("/api/metrics/", body, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["detail"]


def test_dates_with_and_without_fraction_and_offsets(staff_api, run):
    dates = ["2024-05-01T12:00:00Z", "2024-05-01T12:00:00.5+02:00", "2024-05-01T12:00:00"]
    points = [{"run_id": run.pk, "name": "a", "value": 1, "date": d} for d in dates]
    assert staff_api.post("/api/metrics/", points, format="json").status_code == 201
    stored = sorted(m.date.isoformat() for m in Metric.objects.all())
    assert stored == [
        "2024-05-01T10:00:00.500000+00:00",
        "2024-05-01T12:00:00+00:00",
        "2024-05-01T12:00:00+00:00",
    ]


def test_metadata_with_nul_is_a_400_not_a_500(staff_api, run):
    point = {"run_id": run.pk, "name": "a", "value": 1, "metadata": {"k": "a\u0000b"}}
    r = staff_api.post("/api/metrics/", point, format="json")
    assert r.status_code == 400
