"""Finding the master in Kubernetes when the client is given no URL.

Why a module of its own: these rules (which pod or service, which namespace, which node
address) are the original client's discovery, kept behaviour for behaviour, and they are
the only part of the client that needs the `kubernetes` package, imported only when used.
Inside a cluster the master pod is found by its labels and addressed by its IP; outside,
the master service (by name or labels) is reached through its NodePort or load balancer.
"""

from __future__ import annotations

from typing import Any

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class ApiError(Exception):
    """The master could not be found or reached; the message says what to do."""


def master_pod_url(namespace: str | None, label_selector: str, load_config: bool) -> str:
    """The master pod's address, from inside the cluster (its own namespace by default)."""
    client = _kubernetes(load_config, in_cluster=True)
    namespace = namespace or own_namespace()
    pods = client.CoreV1Api().list_namespaced_pod(namespace, label_selector=label_selector)
    running = [p for p in pods.items if p.status and p.status.pod_ip]
    if not running:
        raise ApiError(
            f"no master pod with labels {label_selector!r} in namespace "
            f"{namespace!r}: check the release is installed, or pass url="
        )
    pod = running[0]
    declared = [p.container_port for c in pod.spec.containers or [] for p in c.ports or []]
    port = 80 if 80 in declared or not declared else declared[0]
    return f"http://{pod.status.pod_ip}:{port}"


def master_service_url(
    namespace: str | None, service_name: str | None, label_selector: str, load_config: bool
) -> str:
    """The master's service, in `namespace` or (none given) in any namespace.

    Exactly one must match: with two releases the client cannot guess, and says so.
    NodePort: a node address, ExternalIP before InternalIP, preferring the node the
    master pod runs on; LoadBalancer: its ingress address.
    """
    client = _kubernetes(load_config, in_cluster=False)
    core = client.CoreV1Api()
    where = f"namespace {namespace!r}" if namespace else "any namespace"
    if service_name and namespace:
        found = [core.read_namespaced_service(service_name, namespace)]
    else:
        if namespace:
            listed = core.list_namespaced_service(namespace, label_selector=label_selector).items
        else:
            listed = core.list_service_for_all_namespaces(
                label_selector=None if service_name else label_selector
            ).items
        found = [s for s in listed if s.metadata.name == (service_name or s.metadata.name)]
    if not found:
        what = f"named {service_name!r}" if service_name else f"with labels {label_selector!r}"
        raise ApiError(f"no master service {what} in {where}: pass k8s_namespace= or url=")
    if len(found) > 1:
        names = ", ".join(f"{s.metadata.namespace}/{s.metadata.name}" for s in found)
        raise ApiError(
            f"{len(found)} master services in {where} ({names}): pass k8s_namespace= "
            "(and service_name=) to pick one"
        )
    service = found[0]
    spec = service.spec
    port = next((p for p in spec.ports if p.port == 80), spec.ports[0])
    if spec.type == "NodePort":
        host = (spec.external_ips or [None])[0] or _node_address(core, service, label_selector)
        return f"http://{host}:{port.node_port}"
    if spec.type == "LoadBalancer":
        ingress = (service.status.load_balancer.ingress or []) if service.status else []
        for entry in ingress:
            host = entry.ip or entry.hostname
            if host:
                return f"http://{host}:{port.port}"
        raise ApiError("the master's load balancer has no address yet: try again later")
    raise ApiError(
        f"the master service is of type {spec.type}, not reachable from outside the "
        "cluster: use `kubectl port-forward` and pass url="
    )


def _node_address(core: Any, service: Any, label_selector: str) -> str:
    """A node's ExternalIP (else InternalIP), the master pod's node first."""
    pods = core.list_namespaced_pod(service.metadata.namespace, label_selector=label_selector).items
    on = {p.spec.node_name for p in pods if p.spec and p.spec.node_name}
    nodes = sorted(core.list_node().items, key=lambda n: n.metadata.name not in on)
    for address_type in ("ExternalIP", "InternalIP"):
        for node in nodes:
            for address in (node.status.addresses if node.status else None) or []:
                if address.type == address_type:
                    return address.address
    raise ApiError("the master service is a NodePort but no node has an address")


def own_namespace() -> str:
    """The namespace of the pod this runs in (its service account says), else "default"."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _kubernetes(load_config: bool, in_cluster: bool) -> Any:
    try:
        import kubernetes
    except ImportError as exc:
        raise ApiError(
            "finding the master in Kubernetes needs the `kubernetes` package "
            "(pip install kubernetes); or pass url= to the client"
        ) from exc
    if load_config:
        try:
            if in_cluster:
                kubernetes.config.load_incluster_config()
            else:
                kubernetes.config.load_kube_config()
        except Exception as exc:  # ConfigException and file errors alike
            where = "in-cluster service account" if in_cluster else "kubeconfig"
            raise ApiError(
                f"cannot find the master: no usable Kubernetes {where} ({exc}); "
                "pass url= (e.g. ApiClient(url='http://127.0.0.1:8000'))"
            ) from exc
    return kubernetes.client
