"""An in-memory Kubernetes API (kmock's KubernetesEmulator) over real HTTP on 127.0.0.1.

kmock is asyncio-based; the driver uses the official synchronous client. The emulator runs
in its own thread and event loop, and tests talk to it over HTTP like the driver does. It
runs no controllers: `Controller` below plays the StatefulSet controller and the kubelet by
creating pods and flipping their status through the same API.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from typing import Any

import kmock
from kmock._internal.apps import Server

RESOURCES = {
    "apps/v1/statefulsets": {"kind": "StatefulSet", "namespaced": True},
    "v1/pods": {"kind": "Pod", "namespaced": True, "subresources": ["status", "exec"]},
    "v1/events": {"kind": "Event", "namespaced": True},
}


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
            async with kmock.KubernetesEmulator() as handler, Server(handler) as server:
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
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**template["metadata"], "name": name, "namespace": self.namespace},
                "spec": {**template["spec"], "nodeName": "", "hostname": name},
            }
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


def wait_for(predicate: Any, what: str, limit: float = 10.0) -> None:
    """Poll until `predicate()` holds: the driver works in another thread, and the test must
    act only after the driver's change reached the emulator (else it races the driver)."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
