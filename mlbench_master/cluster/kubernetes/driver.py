"""KubernetesCluster: runs on the worker StatefulSet of the mlbench helm chart.

Every Kubernetes API call of the master is in this file (tests/kubernetes/test_rbac.py
checks that the chart's Role grants exactly these calls, and nothing else).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from mlbench_master.cluster.base import (
    ClusterDriver,
    ClusterError,
    Execution,
    PodInfo,
    PodSample,
    PrepareTimeout,
    RunSpec,
)
from mlbench_master.cluster.kubernetes import shell
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

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_READY_TIMEOUT = 300.0
# Seconds a short command in a pod (tc, pkill, pgrep) may take before it counts as failed.
COMMAND_TIMEOUT = 30.0
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"


def _setting(name: str) -> str | None:
    """A setting from Django's settings when configured, else from the environment."""
    value = None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, name, None)
    except ImportError:  # pragma: no cover - django is a master dependency
        pass
    if value in (None, ""):
        value = os.environ.get(name)
    return None if value in (None, "") else str(value)


def load_api_client() -> Any:
    """An ApiClient from the pod's service account, else from KUBECONFIG / ~/.kube/config."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG") or None,
                client_configuration=configuration,
            )
    except (config.ConfigException, OSError) as error:
        raise ClusterError(
            f"no Kubernetes credentials ({error}): run the master in the cluster with the "
            "chart's service account, or point KUBECONFIG at a kubeconfig file"
        ) from error
    return client.ApiClient(configuration)


def _kubeconfig_namespace() -> str | None:
    try:
        from kubernetes import config

        _, current = config.list_kube_config_contexts(os.environ.get("KUBECONFIG") or None)
        return (current or {}).get("context", {}).get("namespace") or None
    except Exception:  # no kubeconfig: not an error here, the caller says what is missing
        return None


def _cpu_quantity(cores: float) -> str:
    """Kubernetes notation for `cores` CPUs: "2" or "1500m"."""
    millis = round(float(cores) * 1000)
    if millis <= 0:
        raise ClusterError(f"num_cpus must be positive, got {cores}")
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _same_quantity(a: Any, b: Any) -> bool:
    from kubernetes.utils import parse_quantity

    if a is None or b is None:
        return a is None and b is None
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return str(a) == str(b)


def _labels_match(labels: dict[str, str] | None, selector: str) -> bool:
    wanted = dict(item.split("=", 1) for item in selector.split(","))
    return wanted.items() <= (labels or {}).items()


def _ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def _ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _when(event: Any) -> dt.datetime:
    stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return stamp or dt.datetime.min.replace(tzinfo=dt.UTC)


class KubernetesCluster(ClusterDriver):
    """The worker pods of one helm release, in one namespace."""

    name = "kubernetes"
    # mpirun and the ranks' python, resolved on the worker image's PATH (/opt/venv/bin first,
    # also in the ssh sessions that start the other pods' daemons): jobs.run_job reads these.
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
            ready_timeout if ready_timeout is not None else _setting("MLBENCH_K8S_READY_TIMEOUT")
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
            namespace = _setting("MLBENCH_K8S_NAMESPACE")
            if namespace is None and os.path.exists(SERVICE_ACCOUNT_NAMESPACE):
                with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
                    namespace = fh.read().strip() or None
            namespace = namespace or _kubeconfig_namespace()
            if namespace is None:
                raise ClusterError(
                    "the Kubernetes namespace of mlbench is unknown: set MLBENCH_K8S_NAMESPACE"
                )
            self._namespace = namespace
        return self._namespace

    @property
    def release(self) -> str:
        if self._release is None:
            release = _setting("MLBENCH_RELEASE_NAME")
            if release is None:
                raise ClusterError(
                    "the helm release of mlbench is unknown: set MLBENCH_RELEASE_NAME to the "
                    "name given to `helm install`"
                )
            self._release = release
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
        pods = [p for p in items if _labels_match(p.metadata.labels, selector)]
        return sorted(pods, key=lambda p: _ordinal(p.metadata.name))

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
        return max(events, key=_when) if events else None

    # -- prepare ----------------------------------------------------------------------------

    def _desired_resources(self, run: RunSpec, current: dict[str, Any]) -> dict[str, Any]:
        cpu = _cpu_quantity(run.num_cpus)
        limits = dict(current.get("limits") or {})
        requests = dict(current.get("requests") or {})
        for values in (limits, requests):
            if not _same_quantity(values.get("cpu"), cpu):  # "1000m" stays: the same as "1"
                values["cpu"] = cpu
        if run.gpu_enabled:
            # The chart's limits.gpu when it set one, else MLBENCH_MAX_GPUS, else one.
            gpus = (
                limits.get("nvidia.com/gpu") or int(float(_setting("MLBENCH_MAX_GPUS") or 0)) or 1
            )
            limits["nvidia.com/gpu"] = str(gpus)
        else:
            limits.pop("nvidia.com/gpu", None)
            requests.pop("nvidia.com/gpu", None)
        resources = dict(current)
        resources["limits"] = limits
        resources["requests"] = requests
        return resources

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
        resources = self._desired_resources(run, worker.get("resources") or {})
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
        if not self._has_limits(pod, limits):
            return f"{name} {phase}: still running with the previous limits (being replaced)"
        event = self._latest_event(name)
        if event is not None and event.message:
            return f"{name} {phase}: {event.message.strip()}"
        for status in (pod.status.container_statuses or []) if pod.status else []:
            waiting = status.state.waiting if status.state else None
            if waiting is not None and waiting.reason:
                return f"{name} {phase}: {waiting.reason}: {waiting.message or ''}".rstrip(": ")
        return f"{name} {phase}: not Ready"

    @staticmethod
    def _has_limits(pod: Any, limits: dict[str, Any]) -> bool:
        container = next((c for c in pod.spec.containers if c.name == WORKER_CONTAINER), None)
        have = (container.resources.limits or {}) if container and container.resources else {}
        return all(_same_quantity(have.get(k), v) for k, v in limits.items()) and (
            "nvidia.com/gpu" in limits or "nvidia.com/gpu" not in have
        )

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
                if name not in pods
                or not (_ready(pods[name]) and self._has_limits(pods[name], limits))
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

    def _master_addresses(self) -> list[str]:
        """IPv4 addresses of the master (service and pod) that the bandwidth limit spares."""
        addresses = []
        url = self._master_url or _setting("MLBENCH_MASTER_URL") or ""
        host = urlsplit(url).hostname
        if host:
            try:
                addresses += sorted(
                    {a[4][0] for a in socket.getaddrinfo(host, None, socket.AF_INET)}
                )
            except OSError as error:
                log.warning("cannot resolve the master host %s: %s", host, error)
        pod_ip = _setting("MLBENCH_POD_IP")
        if pod_ip and pod_ip not in addresses:
            addresses.append(pod_ip)
        return addresses

    def _apply_bandwidth(self, run: RunSpec, pods: list[str]) -> None:
        mbit = int(run.max_bandwidth or 0)
        command = (
            shell.limit_bandwidth(mbit, self._master_addresses())
            if mbit > 0
            else shell.clear_bandwidth()
        )
        for pod in pods:
            code, output = self.run_in_pod(pod, command)
            if code != 0:
                self._clear_bandwidth(pods)
                raise ClusterError(
                    f"cannot apply the bandwidth limit of {mbit} mbit/s in pod {pod} "
                    f"(tc exit code {code}): {output.strip()[-300:]}"
                )
        self._limited = pods if mbit > 0 else []

    def _clear_bandwidth(self, pods: list[str]) -> None:
        for pod in pods:
            try:
                code, output = self.run_in_pod(pod, shell.clear_bandwidth())
                if code != 0:
                    log.warning("bandwidth limit not removed in %s: %s", pod, output.strip())
            except ClusterError as error:
                log.warning("bandwidth limit not removed in %s: %s", pod, error)
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

    # -- metrics --------------------------------------------------------------------------------

    def pod_metrics(self) -> list[PodSample]:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.utils import parse_quantity

        selector = worker_selector(self.release)
        try:
            answer = client.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                METRICS_GROUP, METRICS_VERSION, self.namespace, "pods", label_selector=selector
            )
        except ApiException as error:
            if error.status in (404, 503):
                if self.metrics_available is not False:
                    log.warning(
                        "no resource metrics: the metrics API (%s/%s) is not served in this "
                        "cluster; install metrics-server to see CPU and memory of the workers",
                        METRICS_GROUP,
                        METRICS_VERSION,
                    )
                self.metrics_available = False
                return []
            raise self._api_error("reading pod metrics", error) from error
        self.metrics_available = True
        in_use = self._pods_in_use()
        samples = []
        for item in answer.get("items", []):
            meta = item.get("metadata", {})
            if not _labels_match(meta.get("labels"), selector):
                continue
            date = _parse_time(item.get("timestamp"))
            usage = [c.get("usage", {}) for c in item.get("containers", [])]
            cpu = sum(float(parse_quantity(u.get("cpu", "0"))) for u in usage)
            memory = sum(float(parse_quantity(u.get("memory", "0"))) for u in usage)
            name = meta.get("name", "")
            extra = in_use.get(name, {})
            samples.append(PodSample(name, "cpu_cores", cpu, date, False, dict(extra)))
            samples.append(PodSample(name, "memory_bytes", memory, date, False, dict(extra)))
            samples += self._network_samples(name, date, extra)
        return samples

    def _pods_in_use(self) -> dict[str, dict[str, int]]:
        """{pod: {"run_id", "rank"}} for the pods of the active run (pod i runs rank i)."""
        try:
            from mlbench_master.runs import active_run

            run = active_run()
        except Exception:  # no database here (a bare driver): metrics without a run
            return {}
        if run is None:
            return {}
        return {
            f"{self.statefulset}-{rank}": {"run_id": int(run.id), "rank": rank}
            for rank in range(int(run.num_workers))
        }

    def _network_samples(
        self, pod: str, date: dt.datetime, metadata: dict[str, int]
    ) -> list[PodSample]:
        """Cumulative bytes through the pod's interfaces (the metrics API has no network)."""
        try:
            code, output = self.run_in_pod(pod, shell.network_counters(), timeout=10)
            rx, tx = (float(v) for v in output.split()[:2])
        except (ClusterError, ValueError):
            return []
        if code != 0:
            return []
        return [
            PodSample(pod, "net_rx_bytes", rx, date, True, dict(metadata)),
            PodSample(pod, "net_tx_bytes", tx, date, True, dict(metadata)),
        ]


def _parse_time(value: str | None) -> dt.datetime:
    if value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)
