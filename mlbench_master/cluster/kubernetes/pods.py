"""The release's workers as the master reaches them: its API client, the worker
StatefulSet, the worker pods, their events, and commands in them (exec).

`WorkerPods` is the base of the driver (driver.py), which decides what to do with a run;
everything here only reads the cluster or runs a command, so it is shared by the
driver's preparing, launching, re-attaching and stopping alike.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mlbench_master.cluster import python_probe
from mlbench_master.cluster.base import ClusterError, PodInfo
from mlbench_master.cluster.kubernetes import images, losses
from mlbench_master.cluster.kubernetes.config import (
    load_api_client,
    namespace_from_environment,
    release_from_environment,
)
from mlbench_master.cluster.kubernetes.execution import Launch
from mlbench_master.cluster.kubernetes.names import (
    WORKER_CONTAINER,
    worker_selector,
    worker_statefulset_name,
)
from mlbench_master.cluster.kubernetes.podexec import (
    ChannelFactory,
    ExecChannel,
    WebSocketChannel,
    run_to_completion,
)
from mlbench_master.cluster.kubernetes.resources import event_time, labels_match, ordinal

log = logging.getLogger(__name__)

# Seconds a short command in a pod (tc, pkill, pgrep) may take before it counts as failed.
COMMAND_TIMEOUT = 30.0
# Seconds the module probe may take: an API request waits for it.
PROBE_TIMEOUT = 10.0

# has_module's answers by (worker image digest, module). A pod's image cannot change under
# it, and the API and the collector make a new driver for every request and round.
_MODULE_ANSWERS: dict[tuple[str, str], bool] = {}
# When a probe could not answer (exec hung or failed), by the same key: not asked again for
# UNANSWERED_FOR seconds, so a stuck exec does not hold every form and defaults request.
_UNANSWERED: dict[tuple[str, str], float] = {}
UNANSWERED_FOR = 60.0


class WorkerPods:
    """The worker pods of one helm release, in one namespace."""

    def __init__(
        self,
        *,
        api_client: Any = None,
        namespace: str | None = None,
        release: str | None = None,
        open_channel: ChannelFactory | None = None,
    ) -> None:
        self._api_client = api_client
        self._namespace = namespace
        self._release = release
        self._open_channel = open_channel
        self._probed_image = ""  # the worker image has_module asked last

    # -- configuration ----------------------------------------------------------------------

    @property
    def api_client(self) -> Any:
        if self._api_client is None:
            self._api_client = load_api_client()
        return self._api_client

    @property
    def namespace(self) -> str:
        if self._namespace is None:
            self._namespace = namespace_from_environment()
        return self._namespace

    @property
    def release(self) -> str:
        if self._release is None:
            self._release = release_from_environment()
        return self._release

    @property
    def statefulset(self) -> str:
        return worker_statefulset_name(self.release)

    def _apps(self) -> Any:
        return client.AppsV1Api(self.api_client)

    def _core(self) -> Any:
        return client.CoreV1Api(self.api_client)

    def _api_error(self, what: str, error: Exception) -> ClusterError:
        status = getattr(error, "status", None)
        reason = getattr(error, "reason", None) or str(error)
        hint = ""
        if status == 403:
            hint = " (the master's service account lacks this right: reinstall the chart)"
        elif status == 404:
            hint = (
                f" (is the chart installed as release {self.release!r} in namespace "
                f"{self.namespace!r}? See MLBENCH_RELEASE_NAME / MLBENCH_K8S_NAMESPACE)"
            )
        return ClusterError(f"Kubernetes API: {what} failed: {status or ''} {reason}{hint}".strip())

    # -- reading ----------------------------------------------------------------------------

    def _worker_pods(self) -> list[Any]:
        selector = worker_selector(self.release)
        try:
            items = self._core().list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as error:
            raise self._api_error("listing the worker pods", error) from error
        # The selector is applied here too: the answer must not depend on the server's care.
        pods = [p for p in items if labels_match(p.metadata.labels, selector)]
        return sorted(pods, key=lambda p: ordinal(p.metadata.name))

    def pods(self) -> list[PodInfo]:
        """The worker slots that exist now."""
        return [
            PodInfo(
                name=p.metadata.name,
                labels=dict(p.metadata.labels or {}),
                phase=(p.status.phase if p.status else None) or "Unknown",
                ip=(p.status.pod_ip if p.status else None) or "",
                node=(p.spec.node_name if p.spec else None) or "",
            )
            for p in self._worker_pods()
        ]

    def _running_pods(self) -> list[str]:
        return [p.metadata.name for p in self._worker_pods() if _running(p)]

    def _read_statefulset(self) -> Any:
        try:
            return self._apps().read_namespaced_stateful_set(self.statefulset, self.namespace)
        except ApiException as error:
            raise self._api_error(f"reading StatefulSet {self.statefulset}", error) from error

    def _statefulset_json(self) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(self._read_statefulset())

    def _worker_container(self, sts: dict[str, Any]) -> dict[str, Any]:
        containers = sts["spec"]["template"]["spec"]["containers"]
        worker = next((c for c in containers if c["name"] == WORKER_CONTAINER), None)
        if worker is None:
            raise ClusterError(
                f"StatefulSet {self.statefulset} has no container named {WORKER_CONTAINER!r}"
            )
        return worker

    def _events(self, name: str) -> list[Any]:
        """The events of the objects named `name` ([] when they cannot be read: they only
        add words to a reason)."""
        try:
            events = (
                self._core()
                .list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
                .items
            )
        except ApiException as error:
            log.warning("cannot read the events of %s: %s", name, error)
            return []
        return [e for e in events if e.involved_object and e.involved_object.name == name]

    def _latest_event(self, name: str) -> Any | None:
        events = self._events(name)
        return max(events, key=event_time) if events else None

    def pod_uid(self, name: str) -> str:
        """The uid of worker pod `name` ("" when it has none), to tell it from its successor."""
        pod = next((p for p in self._worker_pods() if p.metadata.name == name), None)
        return (pod.metadata.uid or "") if pod is not None else ""

    def launcher_lost(self, launch: Launch) -> str | None:
        """Why pod 0 of `launch` cannot hold it any more (gone, replaced, stopped), else None."""
        pod = next((p for p in self._worker_pods() if p.metadata.name == launch.pod), None)
        where = f"pod {launch.pod}, where mpirun ran,"
        if pod is None:
            return f"{where} is gone"
        if launch.pod_uid and pod.metadata.uid != launch.pod_uid:
            return f"{where} was replaced by a new pod of that name"
        if pod.metadata.deletion_timestamp is not None:
            return f"{where} is being deleted"
        phase = (pod.status.phase if pod.status else None) or "Unknown"
        if phase != "Running":
            return f"{where} is {phase}"
        return None

    def workers_seen(self, names: list[str]) -> list[dict[str, Any]]:
        """The launch record's note of the worker pods `names` as they are now (uid, node,
        restarts of the worker container), for `workers_lost` to compare with later."""
        pods = {p.metadata.name: p for p in self._worker_pods()}
        return losses.seen(pods[name] for name in names if name in pods)

    def workers_lost(self, recorded: Any, launcher: str = "") -> str | None:
        """Which of the pods `workers_seen` recorded were lost or had their worker container
        end since, in Kubernetes' words, earliest first; None when none was."""
        found = losses.find(
            losses.from_record(recorded), self._worker_pods(), self._events, launcher
        )
        return losses.reason(found)

    # -- commands in pods -------------------------------------------------------------------

    def channel(self, pod: str, command: list[str], *, binary: bool = False) -> ExecChannel:
        """Start `command` in `pod`'s worker container (the seam tests replace); `binary`
        hands out bytes rather than text."""
        if self._open_channel is not None:
            return self._open_channel(pod, command, binary=binary)
        return WebSocketChannel(
            self._core(), self.namespace, pod, WORKER_CONTAINER, command, binary=binary
        )

    def run_in_pod(
        self, pod: str, command: list[str], timeout: float = COMMAND_TIMEOUT, stdin: str = ""
    ) -> tuple[int, str]:
        """Run a short command in `pod`, `stdin` written to it first; (exit code, output)."""
        channel = self.channel(pod, command)
        if stdin:
            try:
                channel.write(stdin)
            except Exception as error:  # noqa: BLE001 - whatever the websocket raises
                channel.close()
                raise ClusterError(f"cannot write to a command in pod {pod}: {error}") from error
        return run_to_completion(channel, timeout)

    # -- what the worker image has ----------------------------------------------------------

    def has_module(self, module: str, python: str | None = None) -> bool | None:
        """Asked in a running worker pod of the chart's image (the image, not the master,
        decides what a run can import), with the probe the other drivers run; None while
        no such pod runs or the probe cannot answer (the worker then says it itself)."""
        try:
            sts = self._statefulset_json()
            annotations = (sts.get("metadata") or {}).get("annotations")
            current = self._worker_container(sts).get("image") or ""
            chart_image = images.plan(current, annotations, "").original
            pods = self._worker_pods()
            self._probed_image = chart_image
        except ClusterError:
            return None
        for pod in pods:
            if not _running(pod) or images.pod_image(pod) != chart_image:
                continue
            python = python or self.python
            key = (_image_digest(pod) or chart_image, f"{python} {module}")
            if key not in _MODULE_ANSWERS:
                if time.monotonic() - _UNANSWERED.get(key, -UNANSWERED_FOR) < UNANSWERED_FOR:
                    return None
                found = self._probe(pod.metadata.name, module, python)
                if found is None:
                    _UNANSWERED[key] = time.monotonic()
                    return None
                _MODULE_ANSWERS[key] = found
            return _MODULE_ANSWERS[key]
        return None

    def _probe(self, pod: str, module: str, python: str) -> bool | None:
        command = [python, "-c", python_probe.PROBE, module]
        try:
            code, _ = self.run_in_pod(pod, command, timeout=PROBE_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - a probe that fails cannot tell
            log.info("cannot ask pod %s for %s: %s", pod, module, error)
            return None
        return python_probe.answer(code)

    def modules_checked_with(self, python: str | None = None) -> str:
        """The worker image has_module asked last, for a refusal to name."""
        return f"{python or self.python} of the worker image {self._probed_image}".strip()


def _running(pod: Any) -> bool:
    # A pod being deleted is stopping everything in it already.
    return (
        pod.status is not None
        and pod.status.phase == "Running"
        and pod.metadata.deletion_timestamp is None
    )


def _image_digest(pod: Any) -> str:
    """The digest of the image the pod's worker container runs ("" before it started)."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == WORKER_CONTAINER:
            return status.image_id or ""
    return ""
