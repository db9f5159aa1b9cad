"""The chart's pods as containers of the two images, driven through the platform itself.

The master pod: a migrate container to completion, then `web` (port 80, user 10001,
read-only root) and `rq-runs`, with the environment the chart renders for them (secrets
and field references filled in) in the control network namespace, where PostgreSQL and
Redis run as the tests' real servers (podnet.py). The worker StatefulSet's pods: one
container each, with the chart's environment, the install's ssh key mounted read-only, and
the "state" and data-sets volumes. The API objects are the emulator's; pod exec goes into
these containers (apifront.py). What differs from a cluster: no kubelet (the test makes the
pods Ready in the emulator), a kubeconfig instead of the service account, /etc/hosts
instead of cluster DNS.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.images import podnet
from tests.images.engine import docker
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.controllers import Controller

STS = f"{RELEASE}-mlbench-worker"
MASTER_DEPLOYMENT = f"{RELEASE}-mlbench-master"
TOKEN = "images-test-admin-token-0123456789"
# Every container of these tests carries it: what an interrupted session left is removed
# by the next one.
LABEL = "mlbench-images-test=1"


def remove_leftovers() -> None:
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.split()
    if ids:
        docker("rm", "-fv", *ids, check=False)


def worker_address(index: int) -> str:
    return f"{podnet.SUBNET}.{10 + index}"


def resolved_env(container: dict, secrets: dict[str, str], pod_ip: str) -> list[str]:
    """`-e` arguments for a rendered container: values as given, secret keys and field
    references filled in as Kubernetes would."""
    args = []
    for entry in container.get("env", []):
        if "value" in entry:
            value = entry["value"]
        else:
            ref = entry["valueFrom"]
            if "secretKeyRef" in ref:
                value = secrets[ref["secretKeyRef"]["key"]]
            else:
                value = {"metadata.namespace": NAMESPACE, "status.podIP": pod_ip}[
                    ref["fieldRef"]["fieldPath"]
                ]
        args += ["-e", f"{entry['name']}={value}"]
    return args


@dataclass
class PodCluster:
    master_image: str
    worker_image: str
    control_pid: int
    tag: str
    kubeconfig: Path
    ssh_dir: Path
    secrets: dict[str, str]
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    redis_url: str = ""

    @property
    def holder(self) -> str:
        return f"mlbench-{self.tag}-net"

    def _master_pod(self) -> dict:
        return find(manifests(), "Deployment", MASTER_DEPLOYMENT)["spec"]["template"]["spec"]

    def start_master(self) -> None:
        """The master pod's containers (again, after a kill: the same volume, as a pod's
        emptyDir survives its containers)."""
        spec = self._master_pod()
        home = f"mlbench-{self.tag}-home"
        if home not in self.volumes:
            self.volumes.append(home)
        by_name = {c["name"]: c for c in spec["initContainers"] + spec["containers"]}
        for role in ("migrate", "web", "rq-runs", "collector"):
            name = f"mlbench-{self.tag}-{role}"
            docker("rm", "-f", name, check=False)
            argv = [
                "run", "--name", name, "--label", LABEL, "--network", f"container:{self.holder}",
                "--user", "10001:10001", "--read-only", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--tmpfs", "/tmp",
                "-v", f"{home}:/var/lib/mlbench", "-v", f"{self.kubeconfig}:/etc/mlbench/kube:ro",
                "-e", "KUBECONFIG=/etc/mlbench/kube",
                *resolved_env(by_name[role], self.secrets, podnet.MASTER_ADDRESS),
                "-e", f"REDIS_URL={self.redis_url}",
            ]  # fmt: skip
            if role == "migrate":
                docker(*argv, "--rm", self.master_image, "migrate", timeout=300)
                continue
            docker(*argv[:1], "-d", *argv[1:], self.master_image, role)
            if name not in self.containers:
                self.containers.append(name)

    def kill_master(self) -> None:
        for role in ("web", "rq-runs", "collector"):
            docker("kill", f"mlbench-{self.tag}-{role}", check=False)

    def start_workers(self, controller: Controller, count: int = 2) -> None:
        sts = find(manifests(), "StatefulSet", STS)
        pod = sts["spec"]["template"]["spec"]
        container = pod["containers"][0]
        service = sts["spec"]["serviceName"]
        hosts = self.hosts(count, service)
        for index in range(count):
            name = f"{STS}-{index}"
            docker("rm", "-fv", name, check=False)
            docker(
                "run", "-d", "--name", name, "--label", LABEL, "--hostname", name,
                "--network", "none",
                *[f"--add-host={h}:{ip}" for h, ip in hosts.items()],
                "--cap-add", "NET_ADMIN", "--shm-size", "256m",
                "-v", f"{self.ssh_dir}:/etc/mlbench/ssh:ro", "-v", "/var/lib/mlbench",
                "-v", "/datasets", *resolved_env(container, {}, worker_address(index)),
                self.worker_image,
            )  # fmt: skip
            self.containers.append(name)
            podnet.wire(self.control_pid, name, worker_address(index), index)
        names = controller.create_pods(STS, count)
        for index, name in enumerate(names):
            controller.set_phase(name, "Running", ready=True, ip=worker_address(index))

    def hosts(self, count: int, service: str) -> dict[str, str]:
        names = {f"{STS}-{i}.{service}.{NAMESPACE}.svc": worker_address(i) for i in range(count)}
        names[f"{MASTER_DEPLOYMENT}.{NAMESPACE}.svc"] = podnet.MASTER_ADDRESS
        names[MASTER_DEPLOYMENT] = podnet.MASTER_ADDRESS
        return names

    def remove(self) -> None:
        for name in reversed(self.containers):
            docker("rm", "-fv", name, check=False)
        docker("rm", "-f", self.holder, check=False)
        for volume in self.volumes:
            docker("volume", "rm", "-f", volume, check=False)

    def rank_processes(self, index: int) -> list[str]:
        """The benchmark's processes in worker `index` (mpirun's daemons and ranks)."""
        out = docker("exec", f"{STS}-{index}", "ps", "-eo", "args", check=False).stdout.splitlines()
        return [line for line in out if "mlbench_worker" in line or "prted" in line]


class Api:
    """The master's REST API on port 80 of the master pod, as the platform's users call it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Token {TOKEN}"}

    def wait_healthy(self, limit: float = 120) -> None:
        deadline = time.monotonic() + limit
        while True:
            try:
                if requests.get(self.url + "/api/health/", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the master container never became healthy"
            time.sleep(0.5)

    def post(self, path: str, body: dict) -> requests.Response:
        return requests.post(self.url + path, json=body, headers=self.headers, timeout=30)

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(self.url + path, headers=self.headers, timeout=30, **kw)

    def wait(self, run_id: int, states: tuple[str, ...], limit: float = 300) -> dict:
        deadline = time.monotonic() + limit
        while True:
            run = self.get(f"/api/runs/{run_id}/").json()
            if run["state"] in states:
                return run
            assert time.monotonic() < deadline, f"run {run_id} still {run['state']}: {run}"
            time.sleep(0.5)

    def logs(self, run_id: int) -> list[dict]:
        chunks: list[dict] = []
        offset = 0
        while True:
            page = self.get(f"/api/runs/{run_id}/logs/", params={"offset": offset}).json()
            if not page["chunks"]:
                return chunks
            chunks += page["chunks"]
            offset = page["next_offset"]


def new_tag() -> str:
    return uuid.uuid4().hex[:6]


def ssh_key(folder: Path) -> Path:
    folder.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(folder / "id_ecdsa")], check=True
    )
    (folder / "id_ecdsa.pub").unlink()
    return folder
