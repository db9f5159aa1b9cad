"""What a cluster makes of a release's rendered objects, in the API emulator (emulator.py):
pods scheduled on nodes with their addresses, services with theirs, nodes with theirs.
The original client's discovery (test_seed_discovery.py, test_client_discovery.py) reads them.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Iterable
from typing import Any


def install(
    api_client: Any, objects: list[dict[str, Any]], namespace: str, nodes: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """What a cluster makes of a release's rendered objects, as far as finding it goes.

    Services get what their controllers assign (a cluster IP unless headless, a node port
    for every port of a NodePort or LoadBalancer service that names none, a load balancer
    address); every Deployment and StatefulSet gets its pods, scheduled round-robin on
    `nodes`, Running and Ready with an IP. Returns the created services and pods.
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    created: dict[str, list[dict[str, Any]]] = {"services": [], "pods": []}
    addresses = _addresses(namespace)
    placement = itertools.cycle(nodes)
    for obj in objects:
        if obj["kind"] == "Service":
            service = copy.deepcopy(obj)
            service["metadata"]["namespace"] = namespace
            spec = service["spec"]
            kind = spec.get("type", "ClusterIP")
            if spec.get("clusterIP") != "None":
                spec["clusterIP"] = next(addresses["service"])
            if kind in ("NodePort", "LoadBalancer"):
                for port in spec["ports"]:
                    port.setdefault("nodePort", next(addresses["node_port"]))
            core.create_namespaced_service(namespace, service)
            if kind == "LoadBalancer":
                ingress = {"loadBalancer": {"ingress": [{"ip": next(addresses["balancer"])}]}}
                core.patch_namespaced_service_status(
                    service["metadata"]["name"], namespace, {"status": ingress}
                )
            created["services"].append(service)
        elif obj["kind"] in ("Deployment", "StatefulSet"):
            name = obj["metadata"]["name"]
            for i in range(int(obj["spec"].get("replicas", 1))):
                suffix = f"{i}" if obj["kind"] == "StatefulSet" else f"5d8f7c9b4-x{i}z"
                pod_name = f"{name}-{suffix}"
                template = copy.deepcopy(obj["spec"]["template"])
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        **template["metadata"],
                        "name": pod_name,
                        "namespace": namespace,
                        "uid": str(uuid.uuid4()),
                    },
                    "spec": {**template["spec"], "nodeName": next(placement)},
                }
                core.create_namespaced_pod(namespace, pod)
                status = {
                    "phase": "Running",
                    "podIP": next(addresses["pod"]),
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
                core.patch_namespaced_pod_status(pod_name, namespace, {"status": status})
                pod["status"] = status
                created["pods"].append(pod)
    return created


_NAMESPACE_BLOCKS: dict[str, int] = {}


def _addresses(namespace: str) -> dict[str, Iterable[Any]]:
    """Address pools per namespace, so two releases never share an address."""
    block = _NAMESPACE_BLOCKS.setdefault(namespace, len(_NAMESPACE_BLOCKS) + 1)
    return {
        "service": (f"10.96.{block}.{i}" for i in itertools.count(1)),
        "pod": (f"10.244.{block}.{i}" for i in itertools.count(2)),
        "node_port": (30000 + 100 * block + i for i in itertools.count(1)),
        "balancer": (f"203.0.113.{10 * block + i}" for i in itertools.count(1)),
    }


def add_node(api_client: Any, name: str, **addresses: str) -> None:
    """A node with its status addresses, e.g. InternalIP="192.0.2.1", ExternalIP=...."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    status = {"addresses": [{"type": kind, "address": ip} for kind, ip in addresses.items()]}
    core.patch_node_status(name, {"status": status})
