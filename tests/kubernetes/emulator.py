"""An in-memory Kubernetes API (kmock's KubernetesEmulator) over real HTTP on 127.0.0.1.

kmock is asyncio-based; the driver uses the official synchronous client. The emulator runs
in its own thread and event loop, and tests talk to it over HTTP like the driver does.
kmock keeps objects as plain JSON (a PATCH merges dicts, replaces lists, and null removes a
key, as a JSON merge patch does); on top of it, lists here honour `labelSelector` as an API
server does, which the original client's discovery relies on.

Objects get no uid from kmock; the helpers that create pods give each a fresh one, as an
API server does, so a pod re-created under the same name is told from its predecessor.

It runs no controllers. `Controller` plays the StatefulSet controller and the kubelet by
hand, step by step; `StatefulSetController` runs them continuously (scaling, rolling
updates, image pulls that fail) for tests that need a rollout to happen on its own;
`install` turns a release's rendered objects into what a cluster makes of them (pods
scheduled on nodes, services with their addresses).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import kmock
from kmock._internal.apps import Server

RESOURCES = {
    "apps/v1/statefulsets": {"kind": "StatefulSet", "namespaced": True},
    "v1/pods": {"kind": "Pod", "namespaced": True, "subresources": ["status", "exec"]},
    "v1/events": {"kind": "Event", "namespaced": True},
    "v1/services": {"kind": "Service", "namespaced": True, "subresources": ["status"]},
    "v1/nodes": {"kind": "Node", "namespaced": False, "subresources": ["status"]},
}

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9._/-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def selector_matches(selector: str, labels: dict[str, str] | None) -> bool:
    """Whether `labels` satisfy a label selector in the API's text form (k=v, k==v, k!=v,
    k, !k, k in (a,b), k notin (a,b), joined by commas)."""
    labels = labels or {}
    requirements = re.split(r",(?![^(]*\))", selector.strip()) if selector.strip() else []
    for text in requirements:
        match = _REQUIREMENT.match(text)
        if match is None:
            raise ValueError(f"not a label selector requirement: {text!r}")
        key, op, value, negated = match["key"], match["op"], match["value"], match["neg"]
        if negated and (op or match["set"]):
            raise ValueError(f"not a label selector requirement: {text!r}")
        if negated:
            if key in labels:
                return False
        elif op in ("=", "=="):
            if labels.get(key) != value:
                return False
        elif op == "!=":
            if labels.get(key) == value:
                return False
        elif match["set"]:
            values = {v.strip() for v in match["values"].split(",") if v.strip()}
            if (match["set"] == "in") != (labels.get(key) in values):
                return False
        elif key not in labels:
            return False
    return True


class _SelectingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, with lists filtered by `labelSelector` like an API server's."""

    async def _serve_list(self, request: Any) -> Any:
        answer = await super()._serve_list(request)
        selector = (request.params or {}).get("labelSelector")
        if selector:
            answer["items"] = [
                item
                for item in answer["items"]
                if selector_matches(selector, (item.get("metadata") or {}).get("labels"))
            ]
        return answer


class Emulator:
    """Start with `with Emulator() as api:`; `api.client` is a kubernetes ApiClient for it."""

    def __init__(self, *, metrics_api: bool = False) -> None:
        self.metrics_api = metrics_api
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._handler: Any = None
        self.url = ""

    def __enter__(self) -> Emulator:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Kubernetes API emulator did not start")
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        self.client = client.ApiClient(configuration)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

        async def main() -> None:
            async with _SelectingEmulator() as handler, Server(handler) as server:
                for resource, info in RESOURCES.items():
                    handler.resources[resource] = info
                if self.metrics_api:
                    handler.resources["metrics.k8s.io/v1beta1/pods"] = {
                        "kind": "PodMetrics",
                        "namespaced": True,
                    }
                self._handler = handler
                self.url = str(server.url).rstrip("/")
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        asyncio.run(main())

    def requests(self) -> list[Any]:
        """Every request served so far (kmock's parsed requests: method, resource, ...)."""
        return list(self._handler)


class Controller:
    """What the StatefulSet controller and the kubelets would do, done by hand."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.api_client = api_client

    def create_statefulset(self, manifest: dict[str, Any]) -> None:
        self.apps.create_namespaced_stateful_set(self.namespace, manifest)

    def statefulset(self, name: str) -> dict[str, Any]:
        sts = self.apps.read_namespaced_stateful_set(name, self.namespace)
        return self.api_client.sanitize_for_serialization(sts)

    def create_pods(self, sts_name: str, count: int | None = None) -> list[str]:
        """Pods <sts>-0.. from the StatefulSet's current template (Pending, not Ready)."""
        sts = self.statefulset(sts_name)
        count = sts["spec"]["replicas"] if count is None else count
        template = copy.deepcopy(sts["spec"]["template"])
        names = []
        for i in range(count):
            name = f"{sts_name}-{i}"
            pod = pod_manifest(
                name, self.namespace, template["metadata"], {**template["spec"], "nodeName": ""}
            )
            self.core.create_namespaced_pod(self.namespace, pod)
            self.set_phase(name, "Pending")
            names.append(name)
        return names

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.namespace)

    def set_phase(self, name: str, phase: str, *, ready: bool = False, ip: str = "") -> None:
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        if ip:
            status["podIP"] = ip
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})
        if phase == "Running":
            self.core.patch_namespaced_pod(name, self.namespace, {"spec": {"nodeName": "node-a"}})

    def make_ready(self, names: list[str]) -> None:
        for i, name in enumerate(names):
            self.set_phase(name, "Running", ready=True, ip=f"10.0.0.{10 + i}")

    def add_event(self, name: str, kind: str, message: str, when: str, reason: str = "") -> None:
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{name}.{abs(hash((message, when)))}",
                "namespace": self.namespace,
            },
            "involvedObject": {"kind": kind, "name": name, "namespace": self.namespace},
            "reason": reason or "FailedScheduling",
            "message": message,
            "type": "Warning",
            "lastTimestamp": when,
        }
        self.core.create_namespaced_event(self.namespace, event)


def pod_manifest(
    name: str, namespace: str, metadata: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    """A pod of a StatefulSet's template as its controller makes it: named, with a uid of
    its own (a replaced pod is told apart by it) and its name as hostname."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {**spec, "hostname": name},
    }


def wait_for(predicate: Any, what: str, limit: float = 10.0) -> None:
    """Poll until `predicate()` holds: the driver works in another thread, and the test must
    act only after the driver's change reached the emulator (else it races the driver)."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _revision(template: dict[str, Any]) -> str:
    """A pod template's revision, as the controller's controller-revision-hash label."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _worker_image(pod: dict[str, Any]) -> str:
    return next(c["image"] for c in pod["spec"]["containers"] if c["name"] == "worker")


class StatefulSetController:
    """The StatefulSet controller and the kubelets of its pods, running in a thread.

    Like Kubernetes with the chart's settings (podManagementPolicy Parallel, RollingUpdate):
    missing ordinals are created all at once from the current template, extra ones deleted;
    a changed template replaces pods one at a time from the highest ordinal, each only after
    the one replaced before it is Ready. Kubelets: a pod whose image is a key of `unpullable`
    waits with that reason (ImagePullBackOff, InvalidImageName: container status and events
    as a kubelet writes them); one in `never_ready` runs but fails its readiness probe; any
    other pod becomes Running and Ready.
    """

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        *,
        unpullable: Mapping[str, str] | None = None,
        never_ready: Iterable[str] = (),
        interval: float = 0.02,
    ) -> None:
        from kubernetes import client

        # A client of its own: this thread and the test's (and the driver's) do not share one.
        self.api_client = client.ApiClient(api_client.configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.namespace = namespace
        self.name = name
        self.unpullable = dict(unpullable or {})
        self.never_ready = set(never_ready)
        self.interval = interval
        self.replaced: list[str] = []  # pods deleted by rolling updates, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._error: BaseException | None = None
        self._serial = itertools.count(1)

    def __enter__(self) -> StatefulSetController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api_client.close()
        if self._error is not None and exc[0] is None:
            raise RuntimeError("the emulated StatefulSet controller failed") from self._error

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except BaseException as error:  # handed to the test in __exit__
                self._error = error
                return
            self._stop.wait(self.interval)

    def _json(self, obj: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)

    def pods(self) -> dict[int, dict[str, Any]]:
        """This StatefulSet's pods by ordinal, as JSON."""
        prefix = f"{self.name}-"
        found = {}
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            tail = pod.metadata.name.removeprefix(prefix)
            if pod.metadata.name.startswith(prefix) and tail.isdigit():
                found[int(tail)] = self._json(pod)
        return found

    def step(self) -> None:
        sts = self._json(self.apps.read_namespaced_stateful_set(self.name, self.namespace))
        replicas = int(sts["spec"].get("replicas") or 0)
        template = sts["spec"]["template"]
        revision = _revision(template)
        pods = self.pods()
        for ordinal, pod in pods.items():
            if ordinal >= replicas:
                self.core.delete_namespaced_pod(pod["metadata"]["name"], self.namespace)
        for ordinal in range(replicas):
            if ordinal not in pods:
                self._create(ordinal, template, revision)
            else:
                self._kubelet(pods[ordinal])
        for ordinal in reversed(range(replicas)):
            pod = pods.get(ordinal)
            if pod is None:
                break
            if pod["metadata"]["labels"].get("controller-revision-hash") != revision:
                self.replaced.append(pod["metadata"]["name"])
                self.core.delete_namespaced_pod(pod["metadata"]["name"], self.namespace)
                break
            if not _ready(pod):
                break

    def _create(self, ordinal: int, template: dict[str, Any], revision: str) -> None:
        name = f"{self.name}-{ordinal}"
        metadata = copy.deepcopy(template.get("metadata") or {})
        metadata["labels"] = {**metadata.get("labels", {}), "controller-revision-hash": revision}
        pod = pod_manifest(name, self.namespace, metadata, copy.deepcopy(template["spec"]))
        self.core.create_namespaced_pod(self.namespace, pod)
        self.core.patch_namespaced_pod_status(
            name, self.namespace, {"status": {"phase": "Pending", "conditions": []}}
        )

    def _kubelet(self, pod: dict[str, Any]) -> None:
        status = pod.get("status") or {}
        if status.get("containerStatuses"):
            return  # this pod's start was played already
        name = pod["metadata"]["name"]
        image = _worker_image(pod)
        base = {"name": "worker", "image": image, "imageID": "", "restartCount": 0}
        if image in self.unpullable:
            reason = self.unpullable[image]
            if reason == "InvalidImageName":
                message = (
                    f'Failed to apply default image tag "{image}": couldn\'t parse image name '
                    f'"{image}": invalid reference format: repository name must be lowercase'
                )
            else:
                message = f'Back-off pulling image "{image}"'
            waiting = {"reason": reason, "message": message}
            new = {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{**base, "ready": False, "state": {"waiting": waiting}}],
            }
            if reason == "InvalidImageName":
                self._event(name, "InspectFailed", message)
            else:
                self._event(name, "Failed", f'Failed to pull image "{image}": not found')
                self._event(name, "BackOff", message)
        else:
            ip = f"10.1.0.{10 + int(name.rsplit('-', 1)[1])}"
            ready = image not in self.never_ready
            started = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
            new = {
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "containerStatuses": [{**base, "ready": ready, "state": started}],
            }
            if not ready:
                self._event(
                    name, "Unhealthy", f"Readiness probe failed: dial tcp {ip}:22: connect refused"
                )
            self.core.patch_namespaced_pod(name, self.namespace, {"spec": {"nodeName": "node-a"}})
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": new})

    def _event(self, pod: str, reason: str, message: str) -> None:
        serial = next(self._serial)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.{serial}", "namespace": self.namespace},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": self.namespace},
            "reason": reason,
            "message": message,
            "type": "Warning",
            "lastTimestamp": f"2026-01-01T00:{serial // 60 % 60:02d}:{serial % 60:02d}Z",
        }
        self.core.create_namespaced_event(self.namespace, event)

    def settled(self, image: str) -> bool:
        """Every pod of the StatefulSet's current revision runs `image` and is Ready."""
        sts = self._json(self.apps.read_namespaced_stateful_set(self.name, self.namespace))
        pods = self.pods()
        return len(pods) == sts["spec"]["replicas"] and all(
            _ready(p) and _worker_image(p) == image for p in pods.values()
        )


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


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
