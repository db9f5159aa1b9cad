"""After the chart is installed, `mlbench cluster create` waits for the master and reads its
sign-in, through the real kubernetes client and the cluster's own kubeconfig, against the in-memory Kubernetes API
(tests/kubernetes/emulator.py) holding what the chart's objects become in a cluster
(tests/kubernetes/release.py), and a real master (pytest-django's live server) at the
load balancer's address. What no machine here has: the load balancer itself, so the
emulator's Service status names the live server's address, as a cloud's controller would
name the balancer's. Not here: `delete`'s removal of the chart's namespace (the emulator
cannot hold namespaces)."""

from __future__ import annotations

import base64
from urllib.parse import urlparse

import pytest

from mlbench_worker.client.clusters import install, known_clusters, kubeconfig
from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, KubeAccess
from tests.kubernetes.chart import manifests
from tests.kubernetes.emulator import Emulator
from tests.kubernetes.release import install as make_objects

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def cluster(tmp_path, monkeypatch, live_server):
    """A record of a ready GKE-like cluster whose kubeconfig points at the emulator, with
    the chart's objects in it and the master's Service at the live server's address."""
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(install, "POLL_SECONDS", 0.05)
    port = urlparse(live_server.url).port
    spec = ClusterSpec("gcloud", "w1", nodes=2, machine_type="e2-standard-4",
                       zone="us-central1-a")  # fmt: skip
    values = install.values_for(spec)
    values["master"]["service"]["port"] = port
    with Emulator() as api:
        from kubernetes import client

        core = client.CoreV1Api(api.client)
        objects = manifests(values, release=install.RELEASE, namespace=install.NAMESPACE)
        make_objects(api.client, objects, install.NAMESPACE, ["gke-a", "gke-b"])
        secret = {
            "metadata": {"name": install.SECRETS, "namespace": install.NAMESPACE},
            "data": {"admin-token": base64.b64encode(b"tok-123").decode(),
                     "admin-password": base64.b64encode(b"pw-456").decode()},
        }  # fmt: skip
        core.create_namespaced_secret(install.NAMESPACE, secret)
        record = known_clusters.new(spec)
        # kind-style inline credentials: the emulator checks none, and a token command
        # would ask Google for one.
        access = KubeAccess(api.url, "", base64.b64encode(b"c").decode(),
                            base64.b64encode(b"k").decode())  # fmt: skip
        kubeconfig.write(record.kubeconfig, spec.name, record.context, access)
        yield record, core, port


def _balancer(core, address: str) -> None:
    status = {"status": {"loadBalancer": {"ingress": [{"ip": address}]}}}
    core.patch_namespaced_service_status(install.MASTER_SERVICE, install.NAMESPACE, status)


def test_the_master_is_waited_for_at_its_balancer_and_its_sign_in_read(cluster):
    record, core, port = cluster
    said: list[str] = []
    with pytest.raises(ClusterError, match="did not answer within"):
        # No balancer address yet (the emulator's Service has none): the wait says so.
        _balancer(core, "")
        install.wait_for_master(record, said.append, timeout=0.3)
    assert any("no address yet" in line or "waiting" in line for line in said)
    _balancer(core, "127.0.0.1")
    install.wait_for_master(record, said.append, timeout=30)
    assert record.url == f"http://127.0.0.1:{port}"
    assert (record.token, record.password) == ("tok-123", "pw-456")
