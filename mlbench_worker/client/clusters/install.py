"""The chart on a new cluster: its values from the cluster's spec, `helm upgrade --install`,
and the wait until the master answers, with its address and sign-in.

Why the values are derived and not asked for: a user who said "4 nodes of n1-standard-8
with a T4 each" has said how many workers a run may have, how many CPUs and GPUs each,
and which machines they run on. The worker pods select the cluster's machine type by the
node label the master prices runs by (mlbench_master/cluster/node_kinds.py), so runs on the
new cluster have a cost without any typing.

Helm itself installs: the `helm` binary where the user has one, else helm-python-sdk (Helm's
own Go code as a library, as the chart's tests render it): no Debian package ships helm.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from mlbench_worker.client.clusters import prices
from mlbench_worker.client.clusters.known_clusters import ClusterRecord
from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, Say

RELEASE = "mlbench"
NAMESPACE = "mlbench"
# The chart's names for them (charts/mlbench/templates/_helpers.tpl: RELEASE-mlbench-X).
MASTER_SERVICE = f"{RELEASE}-mlbench-master"
SECRETS = f"{RELEASE}-mlbench-secrets"
# Node labels that select spot machines, per provider (node_kinds.PREEMPTIBLE_LABELS).
SPOT_LABELS = {"gcloud": ("cloud.google.com/gke-spot", "true"),
               "aws": ("eks.amazonaws.com/capacityType", "SPOT")}  # fmt: skip
MACHINE_LABEL = "node.kubernetes.io/instance-type"
POLL_SECONDS = 5.0


def chart_path() -> Path:
    """The chart shipped in the repository beside the package (an editable install or a
    checkout); ClusterError with the fix where it is not there."""
    chart = Path(__file__).resolve().parents[3] / "charts" / "mlbench"
    if not (chart / "Chart.yaml").is_file():
        raise ClusterError(
            f"the mlbench chart is not at {chart}",
            "run the command from a checkout of mlbench (git clone, then "
            "pip install -e '.[cloud]'): the chart is in its charts/ folder",
        )
    return chart


def worker_cpus(spec: ClusterSpec) -> str:
    """CPUs of each worker pod: the machine's vCPUs less one for Kubernetes' own pods and
    the master's (on the node that holds it); "1" where the machine is not in the list."""
    entry = prices.machine(spec.provider, spec.machine_type)
    if entry is None or spec.provider == "kind":
        return "1"
    return str(max(1, int(entry["vcpus"]) - 1))


def values_for(spec: ClusterSpec, registry: str = "", tag: str = "") -> dict[str, Any]:
    """The chart's values for a cluster of `spec`: one worker per node at most, each with
    its node's CPUs (less one) and GPUs, on the cluster's machine type, the dashboard
    behind a load balancer (kind: a node port on this machine). `registry` and `tag`
    name the images (default: the chart's, mlbench/mlbench_master and _worker)."""
    selector: dict[str, str] = {}
    if spec.provider != "kind":
        selector[MACHINE_LABEL] = spec.machine_type
        if spec.spot:
            key, value = SPOT_LABELS[spec.provider]
            selector[key] = value
    values: dict[str, Any] = {
        "limits": {"workers": spec.nodes, "cpu": worker_cpus(spec), "gpu": spec.gpus},
        "master": {"service": {"type": "NodePort" if spec.provider == "kind" else "LoadBalancer"}},
        "worker": {"replicas": spec.nodes, "nodeSelector": selector},
        # GKE installs NVIDIA's driver and device plugin itself (the node pool asks for
        # them); EKS's GPU AMI has the driver but not the plugin.
        "nvidiaDevicePlugin": {"enabled": spec.provider == "aws" and spec.gpus > 0},
    }
    for part in ("master", "worker"):
        image: dict[str, str] = {}
        if registry:
            image["repository"] = f"{registry.rstrip('/')}/mlbench_{part}"
        if tag:
            image["tag"] = tag
        if image:
            values[part]["image"] = image
    return values


def helm_command(record: ClusterRecord, chart: Path, values_file: Path) -> list[str]:
    """The `helm` binary's command: install or upgrade (a resumed create), in the cluster's
    own kubeconfig and context, waiting for the pods."""
    return [
        "helm", "upgrade", "--install", RELEASE, str(chart),
        "--namespace", NAMESPACE, "--create-namespace",
        "--kubeconfig", str(record.kubeconfig), "--kube-context", record.context,
        "--values", str(values_file), "--wait", "--timeout", "15m",
    ]  # fmt: skip


def install(record: ClusterRecord, values: dict[str, Any], say: Say, chart: Path) -> None:
    """Install (or upgrade) the release; ClusterError with helm's message on failure."""
    if shutil.which("helm"):
        with tempfile.TemporaryDirectory() as tmp:
            values_file = Path(tmp) / "values.json"
            values_file.write_text(json.dumps(values))
            say(f"installing the chart with helm into namespace {NAMESPACE} (up to 15 minutes)")
            done = subprocess.run(
                helm_command(record, chart, values_file), capture_output=True, text=True
            )
        if done.returncode != 0:
            raise ClusterError(
                f"helm could not install the chart: {(done.stderr or done.stdout).strip()}",
                f"fix what helm says, then `mlbench cluster create {record.spec.provider} "
                f"{record.name}` resumes",
            )
        return
    import helm_python as helm

    say(f"installing the chart (helm's library) into namespace {NAMESPACE} (up to 15 minutes)")
    try:
        with helm.Config(
            kubeconfig_path=str(record.kubeconfig), kube_context=record.context,
            namespace=NAMESPACE,
        ) as config:  # fmt: skip
            try:
                config.status(RELEASE)
                config.upgrade(str(chart), RELEASE, values, namespace=NAMESPACE, wait="watcher",
                               timeout=900)  # fmt: skip
            except helm.HelmNotFoundError:
                config.install(str(chart), RELEASE, values, namespace=NAMESPACE,
                               create_namespace=True, wait="watcher", timeout=900)  # fmt: skip
    except helm.HelmError as exc:
        raise ClusterError(
            f"helm could not install the chart: {exc}",
            f"fix what helm says, then `mlbench cluster create {record.spec.provider} "
            f"{record.name}` resumes",
        ) from None


def master_address(service: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """The dashboard's URL from the master Service and the nodes (API objects as dicts):
    the load balancer's address where it has one yet, else a node's external (then
    internal) address and the node port; None while there is none."""
    spec = service.get("spec") or {}
    port = (spec.get("ports") or [{}])[0]
    if spec.get("type") == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        for entry in ingress:
            host = entry.get("ip") or entry.get("hostname")
            if host:
                return f"http://{host}:{port.get('port', 80)}"
        return None
    node_port = port.get("nodePort")
    if not node_port:
        return None
    for wanted in ("ExternalIP", "InternalIP"):
        for node in nodes:
            for address in (node.get("status") or {}).get("addresses") or []:
                if address.get("type") == wanted and address.get("address"):
                    return f"http://{address['address']}:{node_port}"
    return None


def wait_for_master(record: ClusterRecord, say: Say, timeout: float = 900.0) -> None:
    """Wait until the master's Service has an address and /api/health/ answers there, then
    read the admin token and password from the chart's Secret into `record`."""
    from kubernetes import client, config

    api = client.CoreV1Api(
        config.new_client_from_config(config_file=str(record.kubeconfig), context=record.context)
    )
    deadline = time.monotonic() + timeout
    say("waiting for the master's address (a cloud load balancer takes a few minutes)")
    url = None
    while True:
        service = api.api_client.sanitize_for_serialization(
            api.read_namespaced_service(MASTER_SERVICE, NAMESPACE)
        )
        nodes = api.api_client.sanitize_for_serialization(api.list_node()).get("items", [])
        url = url or master_address(service, nodes)
        if url and _answers(url):
            break
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the master did not answer within {timeout:.0f} s"
                + (f" at {url}" if url else " (its Service has no address yet)"),
                f"look at `kubectl --kubeconfig {record.kubeconfig} -n {NAMESPACE} get pods,svc`; "
                f"`mlbench cluster create {record.spec.provider} {record.name}` resumes",
            )
        time.sleep(POLL_SECONDS)
    secret = api.read_namespaced_secret(SECRETS, NAMESPACE).data or {}
    record.url = url
    record.token = base64.b64decode(secret.get("admin-token", "")).decode()
    record.password = base64.b64decode(secret.get("admin-password", "")).decode()


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/api/health/", timeout=5).status_code == 200
    except requests.RequestException:
        return False
