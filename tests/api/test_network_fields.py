"""POST /api/runs/: the network fields (max_bandwidth, latency) and what the run records."""

import pytest

from mlbench_master.api.models import Run
from mlbench_master.cluster.local import network

pytestmark = pytest.mark.django_db


def body(**fields):
    return {
        "name": "net",
        "num_workers": 2,
        "task": "resnet20-cifar10",
        "dataset": "synthetic",
        **fields,
    }


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_bandwidth", 0),
        ("max_bandwidth", -5),
        ("max_bandwidth", 10_001),
        ("max_bandwidth", "fast"),
        ("latency", -1),
        ("latency", 1_000.5),
        ("latency", 1e12),
        ("latency", "nan"),
        ("latency", "soon"),
    ],
)
def test_bad_network_values_are_refused_naming_the_field(api, redis_settings, field, value):
    before = Run.objects.count()
    r = api.post("/api/runs/", body(**{field: value}), format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json()["errors"], r.json()
    assert Run.objects.count() == before


def test_form_bodies_are_checked_the_same_way(api, redis_settings):
    r = api.post("/api/runs/", {**body(), "latency": "-3"})  # form-encoded, as the seed client
    assert r.status_code == 400 and "latency" in r.json()["errors"]
    r = api.post("/api/runs/", {**body(), "latency": ""})  # an empty form field: not given
    assert r.status_code == 201, r.json()
    assert r.json()["latency"] is None


def test_a_latency_is_stored_and_the_manifest_says_what_will_be_applied(
    api, redis_settings, settings
):
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_LOCAL_NETWORK = "auto"
    r = api.post("/api/runs/", body(max_bandwidth=100, latency=25), format="json")
    assert r.status_code == 201, r.json()
    run = r.json()
    assert run["max_bandwidth"] == 100 and run["latency"] == 25
    assert run["manifest"]["config"]["latency"] == 25
    plan = run["manifest"]["network"]
    assert plan["max_bandwidth"]["requested_mbit_s"] == 100
    missing = network.missing_capability()
    assert plan["max_bandwidth"]["applied"] is (missing is None)
    delay = missing or network.latency_support()
    assert plan["latency"]["applied"] is (delay is None)
    if delay:
        assert run["manifest"]["not_applied"]["latency"] == f"not applied: {delay}"


def test_zero_latency_means_none(api, redis_settings):
    r = api.post("/api/runs/", body(latency=0), format="json")
    assert r.status_code == 201 and r.json()["latency"] is None
