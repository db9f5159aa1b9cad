"""The StatefulSet controller and the kubelets, played for the API emulator (emulator.py).

`Controller` does their work by hand, step by step; `StatefulSetController` runs it
continuously in a thread (scaling, rolling updates, image pulls that fail) for tests that
need a rollout to happen on its own.

Objects get no uid from kmock; the pods made here get a fresh one each, as an API server
gives, so a pod re-created under the same name is told from its predecessor.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any


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
        if self._error is not None:  # the test failed too: say why the pods stopped moving
            print(f"the emulated StatefulSet controller had stopped: {self._error!r}")

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.step()
                failures = 0
            except Exception as error:
                # A step races the test's and the driver's own changes (a pod deleted
                # between the list and the patch answers 404): played again, as a real
                # controller's next sync would. One that keeps failing is handed to the
                # test in __exit__.
                failures += 1
                if failures >= 50:
                    self._error = error
                    return
            self._stop.wait(self.interval)

    @property
    def stopped(self) -> str:
        """Why the controller stopped, for a test's failure message ('' while it runs)."""
        return "" if self._error is None else f" (the emulated controller stopped: {self._error!r})"

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
        events: list[tuple[str, str]] = []  # (reason, message) of a pull failure
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
                events.append(("InspectFailed", message))
            else:
                events.append(("Failed", f'Failed to pull image "{image}": not found'))
                events.append(("BackOff", message))
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
            if not ready:  # its probe fails before the status says not Ready
                self._event(
                    name, "Unhealthy", f"Readiness probe failed: dial tcp {ip}:22: connect refused"
                )
            self.core.patch_namespaced_pod(name, self.namespace, {"spec": {"nodeName": "node-a"}})
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": new})
        # A pull failure's events after the status they explain: a reader that sees the event
        # sees the status too (the other way round, a driver polling under load could read
        # the event beside a pod that had no container status yet).
        for reason, message in events:
            self._event(name, reason, message)

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
