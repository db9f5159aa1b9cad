"""The original client (mlbench-core 3.x's ApiClient) finds this chart's master.

`seed_endpoint` below does what that client does to find the master, written from its
documented behaviour with the same `kubernetes` client: in a cluster, the pods labelled
component=master,app=mlbench in one namespace (exactly one), reached at its pod IP on port
80; outside, the services with those labels in all namespaces (exactly one), reached by
service type. The releases' rendered objects are loaded into the API emulator as a cluster
would run them (`release.install`: pods scheduled with IPs, services with their
addresses, nodes with theirs), and the emulator filters lists by label selector as an API
server does.

That the master pod really answers on port 80, as the client expects, is shown in
test_master_port.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.emulator import Emulator
from tests.kubernetes.release import add_node, install

SEED_SELECTOR = "component=master,app=mlbench"


class NotExactlyOne(AssertionError):
    """The original client refuses to go on (it asserts exactly one match)."""


def seed_endpoint(
    api_client: Any,
    *,
    in_cluster: bool,
    k8s_namespace: str = "default",
    label_selector: str = SEED_SELECTOR,
) -> str:
    """The master URL the original ApiClient would use, found the way it finds it."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    if in_cluster:
        pods = core.list_namespaced_pod(k8s_namespace, label_selector=label_selector).items
        if len(pods) != 1:
            raise NotExactlyOne(f"{len(pods)} master pods in namespace {k8s_namespace}")
        return f"http://{pods[0].status.pod_ip}:80/api/"
    services = core.list_service_for_all_namespaces(label_selector=label_selector).items
    if len(services) != 1:
        raise NotExactlyOne(f"{len(services)} master services in the cluster")
    service = services[0]
    spec = service.spec
    if spec.type == "ClusterIP":
        return f"http://{spec.cluster_ip}:{spec.ports[0].port}/api/"
    if spec.type == "NodePort":
        port = next(p.node_port for p in spec.ports if p.port == 80)
        if spec.external_ips:
            host = spec.external_ips[0]
        else:
            pod = core.list_namespaced_pod(
                service.metadata.namespace, label_selector=label_selector
            ).items[0]
            node = core.read_node(pod.spec.node_name)
            addresses = {a.type: a.address for a in node.status.addresses}
            host = addresses.get("ExternalIP") or addresses["InternalIP"]
        return f"http://{host}:{port}/api/"
    if spec.type == "LoadBalancer":
        ingress = service.status.load_balancer.ingress[0]
        return f"http://{ingress.ip}:{spec.ports[0].port}/api/"
    raise AssertionError(f"service type {spec.type} is not one the original client handles")


def _labels_match(labels: dict[str, str] | None) -> bool:
    wanted = dict(item.split("=") for item in SEED_SELECTOR.split(","))
    return wanted.items() <= (labels or {}).items()


@pytest.fixture
def cluster():
    """An empty cluster of two nodes: one with an external address, one without."""
    with Emulator() as api:
        add_node(api.client, "node-a", InternalIP="192.0.2.11", ExternalIP="198.51.100.11")
        add_node(api.client, "node-b", InternalIP="192.0.2.12")
        yield api


# -------------------------------------------------------------------------------- the chart

EVERY_OPTION = {
    "limits": {"maximumWorkers": 4, "gpu": 1},
    "gcePersistentDisk": {"enabled": True, "pdName": "disk"},
    "weave": {"enabled": True},
    "nvidiaDevicePlugin": {"enabled": True},
}


@pytest.mark.parametrize("values", [{}, EVERY_OPTION], ids=["defaults", "every-option"])
def test_only_the_master_pod_and_service_carry_the_discovery_labels(values):
    objects = manifests(values)
    services = [o for o in objects if o["kind"] == "Service"]
    matching = [s["metadata"]["name"] for s in services if _labels_match(s["metadata"]["labels"])]
    assert matching == [f"{RELEASE}-mlbench-master"]
    templates = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
    }
    assert len(templates) >= 4  # master, worker, redis, postgresql (and plugins)
    assert [name for name, labels in templates.items() if _labels_match(labels)] == [
        f"{RELEASE}-mlbench-master"
    ]
    master = find(objects, "Service", f"{RELEASE}-mlbench-master")
    assert 80 in [p["port"] for p in master["spec"]["ports"]]


# --------------------------------------------------------------------------- in the cluster


def test_in_the_cluster_the_client_finds_exactly_the_master_pod_on_port_80(cluster):
    namespace = "mlbench"
    objects = manifests(namespace=namespace)
    created = install(cluster.client, objects, namespace, ["node-a", "node-b"])
    assert len(created["pods"]) >= 4  # the worker, database and redis pods are there too
    master = next(
        p for p in created["pods"] if p["metadata"]["name"].startswith(f"{RELEASE}-mlbench-master-")
    )
    assert seed_endpoint(cluster.client, in_cluster=True, k8s_namespace=namespace) == (
        f"http://{master['status']['podIP']}:80/api/"
    )
    # The pod found is one whose web server listens on port 80.
    web = next(c for c in master["spec"]["containers"] if c["name"] == "web")
    assert 80 in [p["containerPort"] for p in web["ports"]]
    # The client's default namespace holds no mlbench: it says so rather than guess.
    with pytest.raises(NotExactlyOne, match="0 master pods in namespace default"):
        seed_endpoint(cluster.client, in_cluster=True)


def test_two_releases_in_two_namespaces_each_find_their_own_master(cluster):
    pods = {}
    for release, namespace, values in (
        ("one", "team-a", {}),
        ("two", "team-b", {"master": {"service": {"discoverable": False}}}),
    ):
        objects = manifests(values, release=release, namespace=namespace)
        created = install(cluster.client, objects, namespace, ["node-a"])
        pods[namespace] = next(
            p["status"]["podIP"]
            for p in created["pods"]
            if p["metadata"]["name"].startswith(f"{release}-mlbench-master-")
        )
    for namespace, ip in pods.items():
        found = seed_endpoint(cluster.client, in_cluster=True, k8s_namespace=namespace)
        assert found == f"http://{ip}:80/api/"
    # Outside the cluster the client looks in every namespace: only the release left
    # discoverable answers (with both discoverable it would refuse, finding two).
    found = seed_endpoint(cluster.client, in_cluster=False)
    assert found.startswith("http://198.51.100.11:")  # team-a's master, on node-a


def test_outside_the_cluster_two_discoverable_releases_are_refused_by_the_client(cluster):
    for release, namespace in (("one", "team-a"), ("two", "team-b")):
        install(
            cluster.client, manifests(release=release, namespace=namespace), namespace, ["node-a"]
        )
    with pytest.raises(NotExactlyOne, match="2 master services"):
        seed_endpoint(cluster.client, in_cluster=False)


# ------------------------------------------------------------------------ outside the cluster


def _service(created: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return next(
        s for s in created["services"] if s["metadata"]["name"] == f"{RELEASE}-mlbench-master"
    )


def test_outside_a_nodeport_service_leads_to_the_masters_node_and_node_port(cluster):
    created = install(cluster.client, manifests(), NAMESPACE, ["node-b", "node-a"])
    master = next(
        p for p in created["pods"] if p["metadata"]["name"].startswith(f"{RELEASE}-mlbench-master-")
    )
    node_port = next(p["nodePort"] for p in _service(created)["spec"]["ports"] if p["port"] == 80)
    host = {"node-a": "198.51.100.11", "node-b": "192.0.2.12"}[master["spec"]["nodeName"]]
    found = seed_endpoint(cluster.client, in_cluster=False)
    assert found == f"http://{host}:{node_port}/api/"


@pytest.mark.parametrize("node", ["node-a", "node-b"])
def test_outside_a_nodeport_service_uses_the_external_address_else_the_internal_one(cluster, node):
    values = {"master": {"service": {"nodePort": 30080}}}
    install(cluster.client, manifests(values), NAMESPACE, [node])
    host = {"node-a": "198.51.100.11", "node-b": "192.0.2.12"}[node]
    assert seed_endpoint(cluster.client, in_cluster=False) == f"http://{host}:30080/api/"


def test_outside_a_nodeport_service_with_external_ips_uses_the_first(cluster):
    values = {
        "master": {"service": {"nodePort": 30080, "externalIPs": ["203.0.113.7", "203.0.113.8"]}}
    }
    install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    assert seed_endpoint(cluster.client, in_cluster=False) == "http://203.0.113.7:30080/api/"


def test_outside_a_nodeport_service_on_another_port_still_offers_port_80(cluster):
    values = {"master": {"service": {"port": 8080}}}
    created = install(cluster.client, manifests(values), NAMESPACE, ["node-b"])
    ports = {p["port"]: p for p in _service(created)["spec"]["ports"]}
    assert set(ports) == {8080, 80} and ports[80]["targetPort"] == "http"
    assert seed_endpoint(cluster.client, in_cluster=False) == (
        f"http://192.0.2.12:{ports[80]['nodePort']}/api/"
    )


def test_outside_a_clusterip_service_gives_its_cluster_ip_and_port(cluster):
    values = {"master": {"service": {"type": "ClusterIP"}}}
    created = install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    service = _service(created)
    assert seed_endpoint(cluster.client, in_cluster=False) == (
        f"http://{service['spec']['clusterIP']}:80/api/"
    )


def test_outside_a_loadbalancer_service_gives_its_ingress_address_and_port(cluster):
    from kubernetes import client

    values = {"master": {"service": {"type": "LoadBalancer"}}}
    install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    live = client.CoreV1Api(cluster.client).read_namespaced_service(
        f"{RELEASE}-mlbench-master", NAMESPACE
    )
    ingress = live.status.load_balancer.ingress[0].ip
    assert seed_endpoint(cluster.client, in_cluster=False) == f"http://{ingress}:80/api/"
