"""This project's ApiClient finds the chart's master as the original client did, with the
fixes issue 10 asks for: no namespace given means this pod's own namespace inside a
cluster and any namespace outside it (exactly one master service), and a NodePort is
reached through an external address before an internal one.

The releases' rendered objects are loaded into the API emulator (`release.install`) and
the client talks to it through the `kubernetes` package's default configuration, as it does
with a kubeconfig; `load_config=False` keeps it from reading one from this machine.
"""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from mlbench_worker.client import discovery as client_module
from mlbench_worker.client.api import ApiClient, ApiError
from tests.kubernetes.chart import RELEASE, manifests
from tests.kubernetes.emulator import Emulator
from tests.kubernetes.release import add_node, install


@pytest.fixture
def cluster():
    with Emulator() as emulator:
        add_node(emulator.client, "node-a", InternalIP="192.0.2.11", ExternalIP="198.51.100.11")
        add_node(emulator.client, "node-b", InternalIP="192.0.2.12")
        previous = k8s.Configuration.get_default_copy()
        configuration = k8s.Configuration()
        configuration.host = emulator.url
        k8s.Configuration.set_default(configuration)
        try:
            yield emulator
        finally:
            k8s.Configuration.set_default(previous)


def _client(**kwargs) -> ApiClient:
    return ApiClient(load_config=False, token="t", **kwargs)


def _master_pod_ip(created: dict, release: str = RELEASE) -> str:
    return next(
        p["status"]["podIP"]
        for p in created["pods"]
        if p["metadata"]["name"].startswith(f"{release}-mlbench-master-")
    )


def test_outside_without_a_namespace_finds_the_one_service_anywhere(cluster):
    add_node(cluster.client, "node-c", InternalIP="192.0.2.13", ExternalIP="198.51.100.13")
    values = {"master": {"service": {"type": "NodePort"}}}
    created = install(cluster.client, manifests(values, namespace="team-a"), "team-a", ["node-c"])
    service = next(s for s in created["services"] if s["metadata"]["name"].endswith("-master"))
    node_port = next(p["nodePort"] for p in service["spec"]["ports"] if p["port"] == 80)
    with _client(in_cluster=False) as c:  # the external address of the master pod's node
        assert c.endpoint == f"http://198.51.100.13:{node_port}"
    with _client(in_cluster=False, k8s_namespace="team-a") as c:
        assert c.endpoint == f"http://198.51.100.13:{node_port}"
    with pytest.raises(ApiError, match="no master service with labels .* in namespace 'default'"):
        _client(in_cluster=False, k8s_namespace="default")


def test_a_node_without_an_external_address_defers_to_one_with(cluster):
    values = {"master": {"service": {"type": "NodePort"}}}
    created = install(cluster.client, manifests(values, namespace="ns"), "ns", ["node-b"])
    service = next(s for s in created["services"] if s["metadata"]["name"].endswith("-master"))
    node_port = next(p["nodePort"] for p in service["spec"]["ports"] if p["port"] == 80)
    with _client(in_cluster=False) as c:  # node-b has only an InternalIP; node-a has both
        assert c.endpoint == f"http://198.51.100.11:{node_port}"


def test_a_nodeport_prefers_the_services_external_ips(cluster):
    values = {"master": {"service": {"type": "NodePort", "externalIPs": ["203.0.113.7"]}}}
    created = install(cluster.client, manifests(values, namespace="ns"), "ns", ["node-a"])
    service = next(s for s in created["services"] if s["metadata"]["name"].endswith("-master"))
    node_port = next(p["nodePort"] for p in service["spec"]["ports"] if p["port"] == 80)
    with _client(in_cluster=False) as c:
        assert c.endpoint == f"http://203.0.113.7:{node_port}"


def test_a_load_balancer_is_reached_at_its_ingress(cluster):
    values = {"master": {"service": {"type": "LoadBalancer"}}}
    install(cluster.client, manifests(values, namespace="ns"), "ns", ["node-a"])
    with _client(in_cluster=False) as c:
        assert c.endpoint.startswith("http://203.0.113.") and c.endpoint.endswith(":80")


def test_two_discoverable_releases_are_refused_naming_both(cluster):
    for release, namespace in (("one", "team-a"), ("two", "team-b")):
        values = {"master": {"service": {"type": "NodePort"}}}
        install(cluster.client, manifests(values, release=release, namespace=namespace),
                namespace, ["node-a"])  # fmt: skip
    with pytest.raises(ApiError, match="2 master services in any namespace") as refused:
        _client(in_cluster=False)
    assert "team-a/one-mlbench-master" in str(refused.value)
    assert "team-b/two-mlbench-master" in str(refused.value)
    with _client(in_cluster=False, k8s_namespace="team-b") as c:
        assert c.endpoint.startswith("http://198.51.100.11:")


def test_inside_the_cluster_the_pods_own_namespace_and_port_80(cluster, tmp_path, monkeypatch):
    created = install(cluster.client, manifests(namespace="lab"), "lab", ["node-a"])
    ip = _master_pod_ip(created)
    account = tmp_path / "namespace"
    account.write_text("lab\n")
    monkeypatch.setattr(client_module, "SERVICE_ACCOUNT_NAMESPACE", str(account))
    with _client(in_cluster=True) as c:
        assert c.endpoint == f"http://{ip}:80"
    monkeypatch.setattr(client_module, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "none"))
    with pytest.raises(ApiError, match="in namespace 'default'"):
        _client(in_cluster=True)
    with _client(in_cluster=True, k8s_namespace="lab") as c:
        assert c.endpoint == f"http://{ip}:80"
