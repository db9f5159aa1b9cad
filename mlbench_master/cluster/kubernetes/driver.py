"""KubernetesCluster: runs on the worker StatefulSet of the mlbench helm chart.

A run with a `custom_image_name` (the open division) gets that image in every worker pod:
prepare() sets it on the StatefulSet's template and waits until the pods were replaced and
are Ready with it; the chart's image comes back when the run ends (cancel(), which the job
calls after every launch), when prepare() or launch() fail, and otherwise at the next look
(images.py says how the record of the image to put back survives a dead master).

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
from mlbench_master.cluster.kubernetes import bandwidth, images, shell, usage
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
from mlbench_master.cluster.kubernetes.readiness import (
    Target,
    blocking,
    hopeless_image,
    not_ready_reason,
    ready_for,
)
from mlbench_master.cluster.kubernetes.resources import (
    desired_resources,
    event_time,
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

    def _worker_container(self, sts: dict[str, Any]) -> dict[str, Any]:
        containers = sts["spec"]["template"]["spec"]["containers"]
        worker = next((c for c in containers if c["name"] == WORKER_CONTAINER), None)
        if worker is None:
            raise ClusterError(
                f"StatefulSet {self.statefulset} has no container named {WORKER_CONTAINER!r}"
            )
        return worker

    def _apply(self, patch: dict[str, Any], what: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._apps().patch_namespaced_stateful_set(self.statefulset, self.namespace, patch)
        except ApiException as error:
            raise self._api_error(f"{what} StatefulSet {self.statefulset}", error) from error

    def _patch_statefulset(self, run: RunSpec) -> Target:
        """Scale to num_workers, set the worker container's limits and the run's image."""
        sts = self.api_client.sanitize_for_serialization(self._read_statefulset())
        containers = sts["spec"]["template"]["spec"]["containers"]
        worker = self._worker_container(sts)
        max_gpus = int(float(setting("MLBENCH_MAX_GPUS") or 0))
        resources = desired_resources(run, worker.get("resources") or {}, max_gpus)
        image = images.plan(
            worker.get("image") or "",
            (sts.get("metadata") or {}).get("annotations"),
            run.custom_image_name,
        )
        spec: dict[str, Any] = {}
        if sts["spec"].get("replicas") != run.num_workers:
            spec["replicas"] = run.num_workers
        new_image = image.image != worker.get("image")
        if resources != (worker.get("resources") or {}) or new_image:
            worker["resources"] = resources
            worker["image"] = image.image
            # Whole container entries: a strategic merge (by name) and a plain JSON merge
            # give the same result, so no server can drop the containers' other fields.
            spec["template"] = {"spec": {"containers": containers}}
        patch: dict[str, Any] = {"spec": spec} if spec else {}
        if image.annotations:
            # In the same request as the image: the record and the change never part.
            patch["metadata"] = {"annotations": image.annotations}
        if patch:
            self._apply(patch, "patching")
            changed = sorted(spec) + (["image"] if new_image else [])
            log.info("StatefulSet %s patched: %s", self.statefulset, changed or ["annotations"])
        if image.custom:
            log.info("run %s: worker image %s (was %s)", run.id, image.image, image.original)
        return Target(limits=resources["limits"], image=image.image, custom=image.custom)

    def restore_image(self, run: RunSpec | None = None) -> str | None:
        """Put the worker image back that a run's custom image replaced.

        The record is the StatefulSet's annotations, else the copy in `run`'s launch record.
        Returns the image put back, None when there was nothing to put back. The pods are
        replaced by the StatefulSet controller; nothing waits for them here (the next
        prepare() does).
        """
        sts = self.api_client.sanitize_for_serialization(self._read_statefulset())
        containers = sts["spec"]["template"]["spec"]["containers"]
        worker = self._worker_container(sts)
        annotations = (sts.get("metadata") or {}).get("annotations") or {}
        ours = {k: v for k, v in annotations.items() if k in images.KEYS}
        current = worker.get("image") or ""
        image = images.plan(current, ours or images.from_record(run.launch if run else None), "")
        patch: dict[str, Any] = {}
        if ours:
            patch["metadata"] = {"annotations": dict.fromkeys(ours)}
        if image.image != current:
            worker["image"] = image.image
            patch["spec"] = {"template": {"spec": {"containers": containers}}}
        if patch:
            self._apply(patch, "restoring the worker image of")
        if image.image == current:
            return None
        log.info(
            "StatefulSet %s: worker image %s put back (was %s)",
            self.statefulset,
            image.image,
            current,
        )
        return image.image

    def _restore_quietly(self, run: RunSpec) -> str:
        """restore_image() where a failure must not hide the error being reported: returns
        a note to add to that error ("" when all went well)."""
        try:
            self.restore_image(run)
        except ClusterError as error:
            log.warning("run %s: the worker image was not put back: %s", run.id, error)
            return f"; the chart's worker image was not put back: {error}"
        return ""

    def _template_image(self) -> str:
        sts = self.api_client.sanitize_for_serialization(self._read_statefulset())
        return self._worker_container(sts).get("image") or ""

    def _wait_for_workers(self, run: RunSpec, target: Target) -> list[str]:
        service = self._read_statefulset().spec.service_name or self.statefulset
        wanted = [f"{self.statefulset}-{i}" for i in range(run.num_workers)]
        deadline = time.monotonic() + self.ready_timeout
        while True:
            pods = {p.metadata.name: p for p in self._worker_pods()}
            waiting = [n for n in wanted if n not in pods or not ready_for(pods[n], target)]
            if not waiting:
                return [host_name(name, service, self.namespace) for name in wanted]
            if target.custom:
                self._check_custom_image(target, [pods[n] for n in waiting if n in pods])
            if time.monotonic() >= deadline:
                name = blocking(waiting, pods, target)
                reason = not_ready_reason(name, pods.get(name), target, self._latest_event)
                raise PrepareTimeout(f"workers not Ready after {self.ready_timeout:g} s: {reason}")
            time.sleep(self.poll_interval)

    def _check_custom_image(self, target: Target, waiting: list[Any]) -> None:
        """Give up early when no wait can help: the image can never be pulled, or someone
        (a cancel from the API, a person) put another image on the StatefulSet meanwhile."""
        hopeless = hopeless_image(waiting, target)
        if hopeless is not None:
            raise ClusterError(hopeless)
        now = self._template_image()
        if now != target.image:
            raise ClusterError(
                f"the worker image of StatefulSet {self.statefulset} was changed to {now!r} "
                f"while the run waited for its image {target.image!r} (cancelled?)"
            )

    def prepare(self, run: RunSpec) -> list[str]:
        if run.num_workers < 1:
            raise ClusterError(f"num_workers must be at least 1, got {run.num_workers}")
        target = self._patch_statefulset(run)
        try:
            return self._wait_for_workers(run, target)
        except ClusterError as error:
            if not target.custom:
                raise
            note = self._restore_quietly(run)
            if not note:
                raise
            raise type(error)(f"{error}{note}") from error

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
        # The job calls nothing else when launch() fails: put the chart's image back here.
        try:
            pods = self._run_pod_names(run)
            sts = self.api_client.sanitize_for_serialization(self._read_statefulset())
            image = images.record((sts.get("metadata") or {}).get("annotations"))
            self._apply_bandwidth(run, pods)
        except ClusterError as error:
            raise ClusterError(f"{error}{self._restore_quietly(run)}") from error
        # The data sets are where the pods mount them, whatever the master's own setting is.
        env = {**env, "MLBENCH_DATA_DIR": DATA_DIR}
        try:
            channel = self.channel(pods[0], shell.with_environment(argv))
            channel.write(shell.environment_block(env))
        except (ClusterError, ValueError) as error:
            self._clear_bandwidth(pods)
            note = self._restore_quietly(run)
            raise ClusterError(f"cannot start mpirun in pod {pods[0]}: {error}{note}") from error
        limited = list(self._limited)
        where: dict[str, Any] = {"pods": pods, "launcher": pods[0]}
        if image is not None:
            # A copy of the StatefulSet's record, kept with the run (see restore_image).
            where["image"] = image
        return PodExecution(
            channel,
            # The job kills every execution once it ended (exit 0 too): cancel() then stops
            # what is left and puts the chart's worker image back.
            on_kill=lambda: self.cancel(run),
            on_exit=lambda: self._clear_bandwidth(limited) if limited else None,
            record={
                "kubernetes": where,
                "max_bandwidth": {"requested_mbit_s": run.max_bandwidth, "applied": bool(limited)},
            },
        )

    def _running_pods(self) -> list[str]:
        # A pod being deleted is stopping everything in it already.
        return [
            p.metadata.name
            for p in self._worker_pods()
            if p.status is not None
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
        ]

    def cancel(self, run: RunSpec) -> None:
        """Stop the run's processes in every pod, then put the chart's worker image back
        (after, so no pod is replaced while it is being asked to stop)."""
        failures = []
        for pod in self._running_pods():
            try:
                code, output = self.run_in_pod(pod, shell.stop_run())
            except ClusterError as error:
                code, output = -1, str(error)
            if code != 0:
                failures.append(f"{pod}: {output.strip()[-200:] or f'exit code {code}'}")
        problems = []
        if failures:
            problems.append("processes of the run may survive in " + "; ".join(failures))
        try:
            self.restore_image(run)
        except ClusterError as error:
            problems.append(f"the chart's worker image was not put back: {error}")
        if problems:
            raise ClusterError("; ".join(problems))

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
