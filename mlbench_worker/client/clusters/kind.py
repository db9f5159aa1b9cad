"""kind ("Kubernetes in Docker") as a provider: a cluster of containers on this machine.

Why through kind's own command: kind has no library for Python, and its CLI is the
interface its project keeps stable (`kind create cluster --config`, `kind get kubeconfig`,
`kind delete cluster`). A cluster is one control-plane node and one worker node per
requested node; the chart's worker pods then land one per worker node. Machine types,
GPUs, regions and spot have no meaning here and are refused by name.

Not exercised on the machine that built it: it has neither kind nor a container engine with
networking; the tests check the commands and the configuration it would run, and run kind
itself only where the binary is present.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from mlbench_worker.client.clusters.spec import (
    ClusterError,
    ClusterSpec,
    KubeAccess,
    Ledger,
    Removal,
    Resource,
    Say,
)

INSTALL_HINT = (
    "install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation: a single "
    "binary, e.g. `go install sigs.k8s.io/kind@latest`) and Docker or Podman"
)


def cluster_name(spec: ClusterSpec) -> str:
    """kind's name for it (its containers are KIND-control-plane, KIND-worker, ...)."""
    return f"mlbench-{spec.name}"


def config(spec: ClusterSpec) -> dict[str, Any]:
    """kind's cluster configuration (kind.x-k8s.io/v1alpha4): a control plane and
    `spec.nodes` workers. Written as JSON, which kind reads as YAML."""
    nodes = [{"role": "control-plane"}] + [{"role": "worker"} for _ in range(spec.nodes)]
    return {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "nodes": nodes}


def create_command(spec: ClusterSpec, config_file: str, kubeconfig: str) -> list[str]:
    image = (
        ["--image", f"kindest/node:{spec.kubernetes_version}"] if spec.kubernetes_version else []
    )
    return [
        "kind", "create", "cluster", "--name", cluster_name(spec), "--config", config_file,
        "--kubeconfig", kubeconfig, "--wait", "5m", *image,
    ]  # fmt: skip


def delete_command(spec: ClusterSpec) -> list[str]:
    return ["kind", "delete", "cluster", "--name", cluster_name(spec)]


def _kind() -> str:
    found = shutil.which("kind")
    if not found:
        raise ClusterError("the kind command is not installed", INSTALL_HINT)
    return found


def _run(argv: list[str], what: str, spec: ClusterSpec) -> str:
    done = subprocess.run([_kind(), *argv[1:]], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        if "already exist" in said:
            raise ClusterError(
                f"kind already has a cluster named {cluster_name(spec)}",
                "choose another name, or remove it with "
                f"`kind delete cluster --name {cluster_name(spec)}`",
            )
        raise ClusterError(f"kind could not {what}: {said[-2000:]}", INSTALL_HINT)
    return done.stdout


class Kind:
    name = "kind"

    def complete(self, spec: ClusterSpec) -> ClusterSpec:
        given = {
            "--machine-type": spec.machine_type, "--gpus": spec.gpus,
            "--gpu-type": spec.gpu_type, "--region": spec.region, "--zone": spec.zone,
            "--project": spec.project, "--disk-gb": spec.disk_gb, "--spot": spec.spot,
        }  # fmt: skip
        refused = [option for option, value in given.items() if value]
        if refused:
            raise ClusterError(
                f"kind runs its nodes as containers on this machine: {', '.join(refused)} "
                "has no meaning there",
                "drop it, or use gcloud or aws",
            )
        if spec.nodes < 1:
            raise ClusterError(f"--nodes {spec.nodes}: a cluster needs at least 1", "")
        return spec

    def create(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> KubeAccess:
        import tempfile

        name = cluster_name(spec)
        existing = _run(["kind", "get", "clusters"], "list its clusters", spec).split()
        if name in existing and ledger.first("kind-cluster") is None:
            # Not made by this record: never taken over (a delete would remove it).
            raise ClusterError(
                f"kind already has a cluster named {name}, not made by this create",
                f"choose another name, or remove it with `kind delete cluster --name {name}`",
            )
        if name in existing:
            say(f"kind cluster {name} exists already: reusing it")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                config_file = f"{tmp}/kind.json"
                kubeconfig = f"{tmp}/kubeconfig"
                with open(config_file, "w") as out:
                    json.dump(config(spec), out)
                say(f"creating kind cluster {name}: 1 control plane, {spec.nodes} workers")
                # Recorded before: an interrupted `kind create` leaves containers behind.
                ledger.add(Resource("kind-cluster", name))
                _run(create_command(spec, config_file, kubeconfig), "create the cluster", spec)
        text = _run(["kind", "get", "kubeconfig", "--name", name], "give its kubeconfig", spec)
        return access_from_kubeconfig(text)

    def delete(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> Removal:
        removal = Removal()
        for resource in reversed(ledger.find("kind-cluster")):
            say(f"deleting kind cluster {resource.id}")
            try:
                _run(delete_command(spec), "delete the cluster", spec)
            except ClusterError as exc:
                removal.failed.append((resource, str(exc)))
                continue
            ledger.remove(resource)
            removal.removed.append(resource)
        return removal

    def token(self, spec: ClusterSpec) -> dict[str, Any]:
        raise ClusterError(
            "a kind cluster's kubeconfig holds a client certificate, not a token", ""
        )


def access_from_kubeconfig(text: str) -> KubeAccess:
    """The server, CA and client certificate of the one cluster in kind's kubeconfig
    (YAML; PyYAML is not a dependency of the client, so the three keys are read by line:
    kind writes each as one `key: value` line)."""
    wanted = {"server": "", "certificate-authority-data": "", "client-certificate-data": "",
              "client-key-data": ""}  # fmt: skip
    for line in text.splitlines():
        key, _, value = line.strip().partition(": ")
        if key in wanted and not wanted[key]:
            wanted[key] = value.strip()
    if not wanted["server"]:
        raise ClusterError("kind's kubeconfig names no server", INSTALL_HINT)
    return KubeAccess(
        server=wanted["server"], ca_data=wanted["certificate-authority-data"],
        client_cert_data=wanted["client-certificate-data"],
        client_key_data=wanted["client-key-data"],
    )  # fmt: skip
