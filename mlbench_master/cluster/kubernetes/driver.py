"""KubernetesCluster: runs on the worker StatefulSet of the mlbench helm chart.

Every Kubernetes API call of the master is made from this package (tests/kubernetes/
test_rbac.py checks that the chart's Role grants exactly these calls, and nothing else):
the StatefulSet, pods and events here, pod exec in podexec.py, the metrics API in usage.py.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mlbench_master.cluster.base import (
    CannotAttach,
    ClusterDriver,
    ClusterError,
    Execution,
    PodInfo,
    PodSample,
    PrepareTimeout,
    RunSpec,
)
from mlbench_master.cluster.environment import setting
from mlbench_master.cluster.kubernetes import bandwidth, shell, usage
from mlbench_master.cluster.kubernetes.config import (
    load_api_client,
    namespace_from_environment,
    release_from_environment,
)
from mlbench_master.cluster.kubernetes.names import (
    DATA_DIR,
    WORKER_CONTAINER,
    host_name,
    worker_selector,
    worker_statefulset_name,
)
from mlbench_master.cluster.kubernetes.podexec import (
    ChannelFactory,
    ExecChannel,
    PodExecution,
    WebSocketChannel,
    run_to_completion,
)
from mlbench_master.cluster.kubernetes.resources import (
    desired_resources,
    event_time,
    has_limits,
    is_ready,
    labels_match,
    ordinal,
)

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 300.0
# Seconds a short command in a pod (tc, pkill, pgrep) may take before it counts as failed.
COMMAND_TIMEOUT = 30.0


class KubernetesCluster(ClusterDriver):
    """The worker pods of one helm release, in one namespace."""

    name = "kubernetes"
    # mpirun and the ranks' python, resolved on the worker image's PATH (/opt/venv/bin first,
    # also in the ssh sessions that start the other pods' daemons).
    mpirun = "mpirun"
    python = "python"

    def __init__(
        self,
        *,
        api_client: Any = None,
        namespace: str | None = None,
        release: str | None = None,
        ready_timeout: float | None = None,
        poll_interval: float = 1.0,
        open_channel: ChannelFactory | None = None,
        master_url: str | None = None,
    ) -> None:
        self._api_client = api_client
        self._namespace = namespace
        self._release = release
        timeout = (
            ready_timeout if ready_timeout is not None else setting("MLBENCH_K8S_READY_TIMEOUT")
        )
        self.ready_timeout = float(timeout) if timeout is not None else DEFAULT_READY_TIMEOUT
        self.poll_interval = poll_interval
        self._open_channel = open_channel
        self._master_url = master_url
        # None: not asked yet; False: metrics.k8s.io is absent (said once in the log).
        self.metrics_available: bool | None = None
        self._limited: list[str] = []

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
        from kubernetes import client

        return client.AppsV1Api(self.api_client)

    def _core(self) -> Any:
        from kubernetes import client

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
        from kubernetes.client.exceptions import ApiException

        selector = worker_selector(self.release)
        try:
            items = self._core().list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as error:
            raise self._api_error("listing the worker pods", error) from error
        # The selector is applied here too: the answer must not depend on the server's care.
        pods = [p for p in items if labels_match(p.metadata.labels, selector)]
        return sorted(pods, key=lambda p: ordinal(p.metadata.name))

    def pods(self) -> list[PodInfo]:
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

    def _read_statefulset(self) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._apps().read_namespaced_stateful_set(self.statefulset, self.namespace)
        except ApiException as error:
            raise self._api_error(f"reading StatefulSet {self.statefulset}", error) from error

    def _latest_event(self, name: str) -> Any | None:
        from kubernetes.client.exceptions import ApiException

        try:
            events = (
                self._core()
                .list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
                .items
            )
        except ApiException as error:
            log.warning("cannot read the events of %s: %s", name, error)
            return None
        events = [e for e in events if e.involved_object and e.involved_object.name == name]
        return max(events, key=event_time) if events else None

    # -- prepare ----------------------------------------------------------------------------

    def _patch_statefulset(self, run: RunSpec) -> dict[str, Any]:
        """Scale to num_workers and set the worker container's limits; returns those limits."""
        from kubernetes.client.exceptions import ApiException

        sts = self.api_client.sanitize_for_serialization(self._read_statefulset())
        containers = sts["spec"]["template"]["spec"]["containers"]
        worker = next((c for c in containers if c["name"] == WORKER_CONTAINER), None)
        if worker is None:
            raise ClusterError(
                f"StatefulSet {self.statefulset} has no container named {WORKER_CONTAINER!r}"
            )
        max_gpus = int(float(setting("MLBENCH_MAX_GPUS") or 0))
        resources = desired_resources(run, worker.get("resources") or {}, max_gpus)
        patch: dict[str, Any] = {}
        if sts["spec"].get("replicas") != run.num_workers:
            patch["replicas"] = run.num_workers
        if resources != (worker.get("resources") or {}):
            worker["resources"] = resources
            # Whole container entries: a strategic merge (by name) and a plain JSON merge
            # give the same result, so no server can drop the containers' other fields.
            patch["template"] = {"spec": {"containers": containers}}
        if patch:
            try:
                self._apps().patch_namespaced_stateful_set(
                    self.statefulset, self.namespace, {"spec": patch}
                )
            except ApiException as error:
                raise self._api_error(f"patching StatefulSet {self.statefulset}", error) from error
            log.info("StatefulSet %s patched: %s", self.statefulset, sorted(patch))
        return resources["limits"]

    def _not_ready_reason(self, name: str, pod: Any | None, limits: dict[str, Any]) -> str:
        if pod is None:
            event = self._latest_event(self.statefulset)
            detail = event.message if event is not None and event.message else "not created yet"
            return f"{name} not created: {detail}"
        phase = (pod.status.phase if pod.status else None) or "Unknown"
        if not has_limits(pod, limits):
            return f"{name} {phase}: still running with the previous limits (being replaced)"
        event = self._latest_event(name)
        if event is not None and event.message:
            return f"{name} {phase}: {event.message.strip()}"
        for status in (pod.status.container_statuses or []) if pod.status else []:
            waiting = status.state.waiting if status.state else None
            if waiting is not None and waiting.reason:
                return f"{name} {phase}: {waiting.reason}: {waiting.message or ''}".rstrip(": ")
        return f"{name} {phase}: not Ready"

    def prepare(self, run: RunSpec) -> list[str]:
        if run.num_workers < 1:
            raise ClusterError(f"num_workers must be at least 1, got {run.num_workers}")
        limits = self._patch_statefulset(run)
        service = self._read_statefulset().spec.service_name or self.statefulset
        wanted = [f"{self.statefulset}-{i}" for i in range(run.num_workers)]
        deadline = time.monotonic() + self.ready_timeout
        while True:
            pods = {p.metadata.name: p for p in self._worker_pods()}
            waiting = [
                name
                for name in wanted
                if name not in pods or not (is_ready(pods[name]) and has_limits(pods[name], limits))
            ]
            if not waiting:
                return [host_name(name, service, self.namespace) for name in wanted]
            if time.monotonic() >= deadline:
                name = waiting[0]
                reason = self._not_ready_reason(name, pods.get(name), limits)
                raise PrepareTimeout(f"workers not Ready after {self.ready_timeout:g} s: {reason}")
            time.sleep(self.poll_interval)

    # -- commands in pods ---------------------------------------------------------------------

    def channel(self, pod: str, command: list[str]) -> ExecChannel:
        """Start `command` in `pod`'s worker container (the seam tests replace)."""
        if self._open_channel is not None:
            return self._open_channel(pod, command)
        return WebSocketChannel(self._core(), self.namespace, pod, WORKER_CONTAINER, command)

    def run_in_pod(
        self, pod: str, command: list[str], timeout: float = COMMAND_TIMEOUT
    ) -> tuple[int, str]:
        return run_to_completion(self.channel(pod, command), timeout)

    def _run_pod_names(self, run: RunSpec) -> list[str]:
        """Pods 0 .. num_workers-1, the ones prepare() returned as hosts (pod i runs rank i)."""
        wanted = [f"{self.statefulset}-{i}" for i in range(run.num_workers)]
        existing = {p.metadata.name for p in self._worker_pods()}
        missing = [name for name in wanted if name not in existing]
        if missing:
            raise ClusterError(
                f"{run.num_workers} workers wanted, {', '.join(missing)} missing: "
                "was prepare() called?"
            )
        return wanted

    def _apply_bandwidth(self, run: RunSpec, pods: list[str]) -> None:
        mbit = int(run.max_bandwidth or 0)
        spared = []
        if mbit > 0:
            master_url = self._master_url or setting("MLBENCH_MASTER_URL") or ""
            spared = bandwidth.master_addresses(master_url, setting("MLBENCH_POD_IP"))
        bandwidth.apply(self.run_in_pod, pods, mbit, spared)
        self._limited = pods if mbit > 0 else []

    def _clear_bandwidth(self, pods: list[str]) -> None:
        bandwidth.clear(self.run_in_pod, pods)
        self._limited = []

    # -- launch, cancel -------------------------------------------------------------------------

    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        pods = self._run_pod_names(run)
        self._apply_bandwidth(run, pods)
        # The data sets are where the pods mount them, whatever the master's own setting is.
        env = {**env, "MLBENCH_DATA_DIR": DATA_DIR}
        try:
            channel = self.channel(pods[0], shell.with_environment(argv))
            channel.write(shell.environment_block(env))
        except (ClusterError, ValueError) as error:
            self._clear_bandwidth(pods)
            raise ClusterError(f"cannot start mpirun in pod {pods[0]}: {error}") from error
        limited = list(self._limited)
        return PodExecution(
            channel,
            on_kill=lambda: self.cancel(run),
            on_exit=lambda: self._clear_bandwidth(limited) if limited else None,
            record={
                "kubernetes": {"pods": pods, "launcher": pods[0]},
                "max_bandwidth": {"requested_mbit_s": run.max_bandwidth, "applied": bool(limited)},
            },
        )

    def _running_pods(self) -> list[str]:
        return [
            p.metadata.name
            for p in self._worker_pods()
            if p.status is not None and p.status.phase == "Running"
        ]

    def cancel(self, run: RunSpec) -> None:
        failures = []
        for pod in self._running_pods():
            try:
                code, output = self.run_in_pod(pod, shell.stop_run())
            except ClusterError as error:
                code, output = -1, str(error)
            if code != 0:
                failures.append(f"{pod}: {output.strip()[-200:] or f'exit code {code}'}")
        if failures:
            raise ClusterError("processes of the run may survive in " + "; ".join(failures))

    def is_running(self, run: RunSpec) -> bool:
        for pod in self._running_pods():
            try:
                code, _ = self.run_in_pod(pod, shell.run_alive())
            except ClusterError as error:  # a pod that cannot be asked runs nothing we reach
                log.warning("cannot tell whether %s runs ranks: %s", pod, error)
                continue
            if code == 0:
                return True
        return False

    def check_workers(self, num_workers: int) -> None:
        """The StatefulSet grows to any size; the scheduler says what fits (prepare times out
        naming the pod and why)."""

    def attach(self, run: RunSpec) -> Execution:
        # mpirun's output and exit status come over the exec session of the master that
        # started it; once that master is gone they cannot be read again.
        raise CannotAttach("the kubernetes driver cannot re-attach to a launch")

    # -- metrics --------------------------------------------------------------------------------

    def samples(self, active: RunSpec | None) -> list[PodSample]:
        from kubernetes.client.exceptions import ApiException

        selector = worker_selector(self.release)
        try:
            items = usage.metrics_items(self.api_client, self.namespace, selector)
        except usage.MetricsUnavailable as missing:
            if self.metrics_available is not False:
                log.warning(
                    "no resource metrics: the metrics API (%s) is not served in this cluster; "
                    "install metrics-server to see CPU and memory of the workers",
                    missing,
                )
            self.metrics_available = False
            return []
        except ApiException as error:
            raise self._api_error("reading pod metrics", error) from error
        self.metrics_available = True
        # Pod i runs rank i of the active run.
        ranks = {}
        if active is not None:
            ranks = {
                f"{self.statefulset}-{rank}": {"run_id": int(active.id), "rank": rank}
                for rank in range(int(active.num_workers))
            }
        return usage.pod_samples(items, ranks, self.run_in_pod)
