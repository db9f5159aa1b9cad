# Over 400 lines: the whole driver protocol for Kubernetes; its concerns live in this package's other modules.
"""KubernetesCluster: runs on the worker StatefulSet of the mlbench helm chart.

A run with a `custom_image_name` (the open division) gets that image in every worker pod:
prepare() sets it on the StatefulSet's template and waits until the pods were replaced and
are Ready with it; the chart's image comes back when the run ends (cancel(), which the job
calls after every launch), when prepare() or launch() fail, and otherwise at the next look
(images.py says how the record of the image to put back survives a dead master).

mpirun runs detached in pod 0, its output and exit code in files there (detach.py), so a
run outlives the master that started it: a restarted master re-attaches (attach()) and
reads on from where the last one stored its lines (execution.py).

Every Kubernetes API call of the master is made from this package (tests/kubernetes/
test_rbac.py checks that the chart's Role grants exactly these calls, and nothing else):
the StatefulSet, pods and events (pods.py and here), pod exec in podexec.py, the metrics
API in usage.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any

from kubernetes.client.exceptions import ApiException

from mlbench_master.cluster import node_kinds
from mlbench_master.cluster.base import (
    CannotAttach,
    ClusterDriver,
    ClusterError,
    Execution,
    PodSample,
    PrepareTimeout,
    RunSpec,
)
from mlbench_master.cluster.environment import setting
from mlbench_master.cluster.kubernetes import (
    bandwidth,
    checkpoints,
    detach,
    images,
    losses,
    shell,
    usage,
)
from mlbench_master.cluster.kubernetes.execution import Launch, PodFilesExecution
from mlbench_master.cluster.kubernetes.names import DATA_DIR, STATE_DIR, host_name, worker_selector
from mlbench_master.cluster.kubernetes.podexec import ChannelFactory
from mlbench_master.cluster.kubernetes.pods import WorkerPods
from mlbench_master.cluster.kubernetes.readiness import (
    Target,
    blocking,
    hopeless_image,
    not_ready_reason,
    ready_for,
)
from mlbench_master.cluster.kubernetes.resources import desired_resources
from mlbench_master.cluster.mpirun import rank_count

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 300.0
# Why a run launched by a master from before detached launches cannot be re-attached.
NO_FILES = (
    "its launch record names no output files in a pod (it was started by a master whose "
    "exec session carried mpirun's output, and that session ended with it)"
)


# The clusters (API server and namespace) whose missing metrics API was already logged: the
# collector makes a new driver every round, and once per process is enough to say it.
_METRICS_MISSING_SAID: set[str] = set()


class KubernetesCluster(WorkerPods, ClusterDriver):
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
        state_dir: str = STATE_DIR,
    ) -> None:
        super().__init__(
            api_client=api_client, namespace=namespace, release=release, open_channel=open_channel
        )
        timeout = (
            ready_timeout if ready_timeout is not None else setting("MLBENCH_K8S_READY_TIMEOUT")
        )
        self.ready_timeout = float(timeout) if timeout is not None else DEFAULT_READY_TIMEOUT
        self.poll_interval = poll_interval
        self._master_url = master_url
        # Where the worker pods keep launches and checkpoints (the chart's "state" emptyDir).
        self.state_dir = state_dir.rstrip("/")
        # None: not asked yet; False: metrics.k8s.io is absent (said once in the log).
        self.metrics_available: bool | None = None

    # -- prepare ----------------------------------------------------------------------------

    def _apply(self, patch: dict[str, Any], what: str) -> None:
        try:
            self._apps().patch_namespaced_stateful_set(self.statefulset, self.namespace, patch)
        except ApiException as error:
            raise self._api_error(f"{what} StatefulSet {self.statefulset}", error) from error

    def _patch_statefulset(self, run: RunSpec) -> Target:
        """Scale to num_workers, set the worker container's limits and the run's image."""
        sts = self._statefulset_json()
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
        sts = self._statefulset_json()
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
        sts = self._statefulset_json()
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

    def _apply_bandwidth(self, run: RunSpec, pods: list[str]) -> list[str]:
        """Limit (or unlimit) the pods; returns those that carry a limit now."""
        mbit = int(run.max_bandwidth or 0)
        spared = []
        if mbit > 0:
            master_url = self._master_url or setting("MLBENCH_MASTER_URL") or ""
            spared = bandwidth.master_addresses(master_url, setting("MLBENCH_POD_IP"))
        bandwidth.apply(self.run_in_pod, pods, mbit, spared, run.latency_ms)
        return pods if mbit > 0 else []

    # -- launch, attach, cancel -----------------------------------------------------------------

    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        # The job calls nothing else when launch() fails: put the chart's image back here.
        try:
            pods = self._run_pod_names(run)
            # The pods of the ranks as they are now: a failed launch is compared with it.
            seen = self.workers_seen(pods[: rank_count(run)])
            sts = self._statefulset_json()
            image = images.record((sts.get("metadata") or {}).get("annotations"))
            template = ((sts.get("spec") or {}).get("template") or {}).get("spec") or {}
            nodes = node_kinds.kubernetes_nodes(
                [str(w.get("node") or "") for w in seen], template.get("nodeSelector")
            )
            limited = self._apply_bandwidth(run, pods)
        except ClusterError as error:
            raise ClusterError(f"{error}{self._restore_quietly(run)}") from error
        # The data sets are where the pods mount them, whatever the master's own setting is.
        env = {**env, "MLBENCH_DATA_DIR": DATA_DIR}
        try:
            launch = self._start_detached(run, pods[0], argv, env)
        except (ClusterError, ValueError) as error:
            bandwidth.clear(self.run_in_pod, pods)
            note = self._restore_quietly(run)
            raise ClusterError(f"cannot start mpirun in pod {pods[0]}: {error}{note}") from error
        where: dict[str, Any] = {"pods": pods, **launch.fields(), losses.RECORD_KEY: seen}
        if image is not None:
            # A copy of the StatefulSet's record, kept with the run (see restore_image).
            where["image"] = image
        record = {
            "kubernetes": where,
            "max_bandwidth": {"requested_mbit_s": run.max_bandwidth, "applied": bool(limited)},
            "latency": {
                "requested_ms": run.latency_ms,
                "applied": bool(limited and run.latency_ms),
            },
            node_kinds.RECORD_KEY: nodes,
        }
        return self._execution(dataclasses.replace(run, launch=record), launch, (0, 0))

    def _start_detached(
        self, run: RunSpec, pod: str, argv: list[str], env: dict[str, str]
    ) -> Launch:
        """Start mpirun detached in `pod` (detach.py); returns once it runs there."""
        stdin = shell.environment_block(env)
        launch_id = uuid.uuid4().hex[:12]
        directory = f"{self.state_dir}/launches/run-{run.id}-{launch_id}"
        uid = self.pod_uid(pod)
        try:
            code, output = self.run_in_pod(
                pod, detach.launch(directory, launch_id, argv), stdin=stdin
            )
        except ClusterError:
            self._stop_quietly(pod, launch_id)  # the answer may be what was lost
            raise
        if code != 0:
            self._stop_quietly(pod, launch_id)
            raise ClusterError(output.strip()[-500:] or f"exit code {code}")
        return Launch(pod=pod, pod_uid=uid, directory=directory, launch_id=launch_id)

    def _stop_quietly(self, pod: str, launch_id: str) -> None:
        try:
            self.run_in_pod(pod, detach.stop(launch_id))
        except ClusterError as error:
            log.warning("launch %s in %s may have survived: %s", launch_id, pod, error)

    def _execution(self, run: RunSpec, launch: Launch, offsets: tuple[int, int]) -> Execution:
        """The Execution of `launch`; `run.launch` is its record."""
        pods = (run.launch.get("kubernetes") or {}).get("pods") or [launch.pod]
        limited = bool((run.launch.get("max_bandwidth") or {}).get("applied"))
        return PodFilesExecution(
            self,
            launch,
            offsets=offsets,
            record=run.launch,
            # The job kills every execution once it ended (exit 0 too): cancel() then stops
            # what is left and puts the chart's worker image back.
            on_kill=lambda: self.cancel(run),
            on_exit=lambda: bandwidth.clear(self.run_in_pod, pods) if limited else None,
        )

    def attach(self, run: RunSpec) -> Execution:
        """The detached launch of `run` in pod 0, read on from the offsets saved there. It
        cannot be had when pod 0 is gone or was replaced (its files went with it)."""
        launch = Launch.from_record(run.launch)
        if launch is None:
            raise CannotAttach(NO_FILES)
        unreadable = f"cannot read its launch in pod {launch.pod}"
        try:
            lost = self.launcher_lost(launch)
        except ClusterError as error:
            raise CannotAttach(f"{unreadable}: {error}") from error
        if lost:
            raise CannotAttach(f"{lost}; mpirun's output and exit code were in it")
        try:
            command = detach.probe(launch.directory, launch.launch_id)
            code, output = self.run_in_pod(launch.pod, command)
            if code != 0:
                raise ClusterError(output.strip()[-300:] or f"exit code {code}")
            probe = detach.Probe.parse(output)
        except (ClusterError, ValueError) as error:
            raise CannotAttach(f"{unreadable}: {error}") from error
        if not probe.found:
            raise CannotAttach(
                f"the files of its launch ({launch.directory}) are missing from pod {launch.pod}"
            )
        return self._execution(run, launch, probe.offsets)

    def cancel(self, run: RunSpec) -> None:
        """Stop the run's processes (its detached launch in pod 0 by its marker, mpirun's
        daemons and ranks in every pod by name), then put the chart's worker image back
        (after, so no pod is replaced while it is being asked to stop)."""
        self._stop_everywhere(Launch.from_record(run.launch), run)

    def stop_all(self) -> list[str]:
        """What `cancel` stops, without a run: every run process in every running worker pod
        (by name), and the chart's worker image back. Which runs they were is not asked."""
        self._stop_everywhere(None, None)
        return []

    def _stop_everywhere(self, launch: Launch | None, run: RunSpec | None) -> None:
        running = self._running_pods()
        commands = [(pod, shell.stop_run()) for pod in running]
        if launch is not None and launch.pod in running:
            commands.insert(0, (launch.pod, detach.stop(launch.launch_id)))
        failures = []
        for pod, command in commands:
            try:
                code, output = self.run_in_pod(pod, command)
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
        launch = Launch.from_record(run.launch)
        if launch is not None:
            try:
                code, output = self.run_in_pod(
                    launch.pod, detach.probe(launch.directory, launch.launch_id)
                )
                if code == 0 and detach.Probe.parse(output).running:
                    return True
            except (ClusterError, ValueError) as error:
                log.warning("cannot ask %s about run %s's launch: %s", launch.pod, run.id, error)
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

    def checkpoint_dir(self, run_id: int) -> str:
        """Where run `run_id`'s ranks keep training checkpoints: /datasets/checkpoints/run-N
        on the data-sets disk when the chart mounts a persistent one writable (it outlives
        the pods), else STATE_DIR/checkpoints/run-N on the pods' "state" emptyDir (it
        outlives mpirun and container restarts, not the pod). checkpoints.py decides."""
        return checkpoints.directory(self._statefulset_json(), run_id, self.state_dir)

    def delete_checkpoints(self, run_id: int) -> None:
        """Remove run `run_id`'s checkpoint folder in pod 0, where rank 0 wrote it. Without
        a running pod 0 an emptyDir's went with its pod already; a disk's cannot be reached
        then, and the ClusterError says it stays."""
        directory = self.checkpoint_dir(run_id)
        pod = f"{self.statefulset}-0"
        if pod not in self._running_pods():
            if directory.startswith(f"{DATA_DIR}/"):
                raise ClusterError(f"{directory} stays on the data-sets disk: {pod} is not running")
            return
        code, output = self.run_in_pod(pod, shell.remove_tree(directory))
        if code != 0:
            raise ClusterError(f"cannot remove {directory} in {pod}: {output.strip()[-200:]}")

    # -- metrics --------------------------------------------------------------------------------

    def samples(self, active: RunSpec | None) -> list[PodSample]:
        selector = worker_selector(self.release)
        try:
            items = usage.metrics_items(self.api_client, self.namespace, selector)
        except usage.MetricsUnavailable as missing:
            said = f"{self.api_client.configuration.host} {self.namespace}"
            if said not in _METRICS_MISSING_SAID:
                _METRICS_MISSING_SAID.add(said)
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
        _METRICS_MISSING_SAID.discard(f"{self.api_client.configuration.host} {self.namespace}")
        # Pod i runs rank i of the active run.
        ranks = {}
        if active is not None:
            ranks = {
                f"{self.statefulset}-{rank}": {"run_id": int(active.id), "rank": rank}
                for rank in range(int(active.num_workers))
            }
        return usage.pod_samples(items, ranks, self.run_in_pod)
