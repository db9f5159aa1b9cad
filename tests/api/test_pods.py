"""GET /api/pods/ (seed: a list of {name, labels, phase, ip})."""

import pytest

from mlbench_master.api.models import Pod
from mlbench_master.cluster.base import PodInfo
from mlbench_master.runs.pods import sync_pods

pytestmark = pytest.mark.django_db


def test_seed_example_shape(api):
    Pod.objects.create(
        name="worn-mouse-mlbench-worker-0",
        labels={"app": "mlbench", "component": "worker", "release": "worn-mouse"},
        phase="Running",
        ip="10.244.2.58",
    )
    r = api.get("/api/pods", HTTP_ACCEPT="application/json, text/javascript")
    assert r.status_code == 200
    [pod] = r.json()
    assert pod["name"] == "worn-mouse-mlbench-worker-0"
    assert pod["labels"]["component"] == "worker"
    assert pod["phase"] == "Running" and pod["ip"] == "10.244.2.58"
    assert set(pod) >= {"name", "labels", "phase", "ip", "node", "last_seen"}


def test_sync_replaces_vanished_pods_but_keeps_their_metrics(api):
    from mlbench_master.api.models import Metric

    sync_pods([PodInfo("w-0", {"app": "mlbench"}, "Running", "10.0.0.1")])
    Metric.objects.create(pod_name="w-0", name="cpu_cores", value=1.0)
    sync_pods([PodInfo("w-1", {}, "Pending", "")])
    assert [p["name"] for p in api.get("/api/pods/").json()] == ["w-1"]
    assert api.get("/api/metrics/w-0/").json()["cpu_cores"][0]["value"] == 1.0


def test_needs_auth_unless_public(anon, settings):
    assert anon.get("/api/pods/").status_code == 401
    settings.MLBENCH_PUBLIC_READ = True
    assert anon.get("/api/pods/").status_code == 200
