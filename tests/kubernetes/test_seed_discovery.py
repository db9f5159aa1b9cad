"""The original client (mlbench-core 3.x's ApiClient) finds this chart's master.

`seed_endpoint` below does what that client does to find the master, written from its
documented behaviour with the same `kubernetes` client: in a cluster, the pods labelled
component=master,app=mlbench in one namespace (exactly one), reached at its pod IP on port
80; outside, the services with those labels in all namespaces (exactly one), reached by
service type. The releases' rendered objects are loaded into the API emulator as a cluster
would run them (`emulator.install`: pods scheduled with IPs, services with their
addresses, nodes with theirs), and the emulator filters lists by label selector as an API
server does.

That the master pod really answers on port 80 as its non-root user is shown by starting
the chart's web container command (scripts/k8s/master-entrypoint.sh, real gunicorn and
Django) in a network namespace of its own, as the chart's user, with and without the
chart's sysctl.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.emulator import Emulator, add_node, install

ROOT = Path(__file__).resolve().parents[2]
SEED_SELECTOR = "component=master,app=mlbench"
SYSCTL = "net.ipv4.ip_unprivileged_port_start"


class NotExactlyOne(AssertionError):
    """The original client refuses to go on (it asserts exactly one match)."""


def seed_endpoint(
    api_client: Any,
    *,
    in_cluster: bool,
    k8s_namespace: str = "default",
    label_selector: str = SEED_SELECTOR,
) -> str:
    """The master URL the original ApiClient would use, found the way it finds it."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    if in_cluster:
        pods = core.list_namespaced_pod(k8s_namespace, label_selector=label_selector).items
        if len(pods) != 1:
            raise NotExactlyOne(f"{len(pods)} master pods in namespace {k8s_namespace}")
        return f"http://{pods[0].status.pod_ip}:80/api/"
    services = core.list_service_for_all_namespaces(label_selector=label_selector).items
    if len(services) != 1:
        raise NotExactlyOne(f"{len(services)} master services in the cluster")
    service = services[0]
    spec = service.spec
    if spec.type == "ClusterIP":
        return f"http://{spec.cluster_ip}:{spec.ports[0].port}/api/"
    if spec.type == "NodePort":
        port = next(p.node_port for p in spec.ports if p.port == 80)
        if spec.external_ips:
            host = spec.external_ips[0]
        else:
            pod = core.list_namespaced_pod(
                service.metadata.namespace, label_selector=label_selector
            ).items[0]
            node = core.read_node(pod.spec.node_name)
            addresses = {a.type: a.address for a in node.status.addresses}
            host = addresses.get("ExternalIP") or addresses["InternalIP"]
        return f"http://{host}:{port}/api/"
    if spec.type == "LoadBalancer":
        ingress = service.status.load_balancer.ingress[0]
        return f"http://{ingress.ip}:{spec.ports[0].port}/api/"
    raise AssertionError(f"service type {spec.type} is not one the original client handles")


def _labels_match(labels: dict[str, str] | None) -> bool:
    wanted = dict(item.split("=") for item in SEED_SELECTOR.split(","))
    return wanted.items() <= (labels or {}).items()


def _master_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return find(objects, "Deployment", f"{RELEASE}-mlbench-master")["spec"]["template"]


def _missing(why: str) -> None:
    """Skip on a developer's machine; in CI a missing capability must fail, not pass."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def cluster():
    """An empty cluster of two nodes: one with an external address, one without."""
    with Emulator() as api:
        add_node(api.client, "node-a", InternalIP="192.0.2.11", ExternalIP="198.51.100.11")
        add_node(api.client, "node-b", InternalIP="192.0.2.12")
        yield api


# -------------------------------------------------------------------------------- the chart

EVERY_OPTION = {
    "limits": {"maximumWorkers": 4, "gpu": 1},
    "gcePersistentDisk": {"enabled": True, "pdName": "disk"},
    "weave": {"enabled": True},
    "nvidiaDevicePlugin": {"enabled": True},
}


@pytest.mark.parametrize("values", [{}, EVERY_OPTION], ids=["defaults", "every-option"])
def test_only_the_master_pod_and_service_carry_the_discovery_labels(values):
    objects = manifests(values)
    services = [o for o in objects if o["kind"] == "Service"]
    matching = [s["metadata"]["name"] for s in services if _labels_match(s["metadata"]["labels"])]
    assert matching == [f"{RELEASE}-mlbench-master"]
    templates = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
    }
    assert len(templates) >= 4  # master, worker, redis, postgresql (and plugins)
    assert [name for name, labels in templates.items() if _labels_match(labels)] == [
        f"{RELEASE}-mlbench-master"
    ]
    master = find(objects, "Service", f"{RELEASE}-mlbench-master")
    assert 80 in [p["port"] for p in master["spec"]["ports"]]


def test_the_master_pod_listens_on_port_80_without_root():
    pod = _master_pod(manifests())["spec"]
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    sysctls = {s["name"]: s["value"] for s in security["sysctls"]}
    assert int(sysctls[SYSCTL]) <= 80
    web = next(c for c in pod["containers"] if c["name"] == "web")
    assert {"name": "http", "containerPort": 80, "protocol": "TCP"} in web["ports"]
    env = {e["name"]: e.get("value") for e in web["env"]}
    assert env["MLBENCH_WEB_PORT"] == "80"
    assert web["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert web["securityContext"]["allowPrivilegeEscalation"] is False
    assert web["readinessProbe"]["httpGet"]["port"] == "http"  # the kubelet asks port 80 too


def test_a_container_port_above_1024_needs_no_sysctl():
    pod = _master_pod(manifests({"master": {"containerPort": 8000}}))["spec"]
    assert "sysctls" not in pod["securityContext"]
    web = next(c for c in pod["containers"] if c["name"] == "web")
    assert web["ports"][0]["containerPort"] == 8000


# --------------------------------------------------------------------------- in the cluster


def test_in_the_cluster_the_client_finds_exactly_the_master_pod_on_port_80(cluster):
    namespace = "mlbench"
    objects = manifests(namespace=namespace)
    created = install(cluster.client, objects, namespace, ["node-a", "node-b"])
    assert len(created["pods"]) >= 4  # the worker, database and redis pods are there too
    master = next(
        p for p in created["pods"] if p["metadata"]["name"].startswith(f"{RELEASE}-mlbench-master-")
    )
    assert seed_endpoint(cluster.client, in_cluster=True, k8s_namespace=namespace) == (
        f"http://{master['status']['podIP']}:80/api/"
    )
    # The pod found is one whose web server listens on port 80.
    web = next(c for c in master["spec"]["containers"] if c["name"] == "web")
    assert 80 in [p["containerPort"] for p in web["ports"]]
    # The client's default namespace holds no mlbench: it says so rather than guess.
    with pytest.raises(NotExactlyOne, match="0 master pods in namespace default"):
        seed_endpoint(cluster.client, in_cluster=True)


def test_two_releases_in_two_namespaces_each_find_their_own_master(cluster):
    pods = {}
    for release, namespace, values in (
        ("one", "team-a", {}),
        ("two", "team-b", {"master": {"service": {"discoverable": False}}}),
    ):
        objects = manifests(values, release=release, namespace=namespace)
        created = install(cluster.client, objects, namespace, ["node-a"])
        pods[namespace] = next(
            p["status"]["podIP"]
            for p in created["pods"]
            if p["metadata"]["name"].startswith(f"{release}-mlbench-master-")
        )
    for namespace, ip in pods.items():
        found = seed_endpoint(cluster.client, in_cluster=True, k8s_namespace=namespace)
        assert found == f"http://{ip}:80/api/"
    # Outside the cluster the client looks in every namespace: only the release left
    # discoverable answers (with both discoverable it would refuse, finding two).
    found = seed_endpoint(cluster.client, in_cluster=False)
    assert found.startswith("http://198.51.100.11:")  # team-a's master, on node-a


def test_outside_the_cluster_two_discoverable_releases_are_refused_by_the_client(cluster):
    for release, namespace in (("one", "team-a"), ("two", "team-b")):
        install(
            cluster.client, manifests(release=release, namespace=namespace), namespace, ["node-a"]
        )
    with pytest.raises(NotExactlyOne, match="2 master services"):
        seed_endpoint(cluster.client, in_cluster=False)


# ------------------------------------------------------------------------ outside the cluster


def _service(created: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return next(
        s for s in created["services"] if s["metadata"]["name"] == f"{RELEASE}-mlbench-master"
    )


def test_outside_a_nodeport_service_leads_to_the_masters_node_and_node_port(cluster):
    created = install(cluster.client, manifests(), NAMESPACE, ["node-b", "node-a"])
    master = next(
        p for p in created["pods"] if p["metadata"]["name"].startswith(f"{RELEASE}-mlbench-master-")
    )
    node_port = next(p["nodePort"] for p in _service(created)["spec"]["ports"] if p["port"] == 80)
    host = {"node-a": "198.51.100.11", "node-b": "192.0.2.12"}[master["spec"]["nodeName"]]
    found = seed_endpoint(cluster.client, in_cluster=False)
    assert found == f"http://{host}:{node_port}/api/"


@pytest.mark.parametrize("node", ["node-a", "node-b"])
def test_outside_a_nodeport_service_uses_the_external_address_else_the_internal_one(cluster, node):
    values = {"master": {"service": {"nodePort": 30080}}}
    install(cluster.client, manifests(values), NAMESPACE, [node])
    host = {"node-a": "198.51.100.11", "node-b": "192.0.2.12"}[node]
    assert seed_endpoint(cluster.client, in_cluster=False) == f"http://{host}:30080/api/"


def test_outside_a_nodeport_service_with_external_ips_uses_the_first(cluster):
    values = {
        "master": {"service": {"nodePort": 30080, "externalIPs": ["203.0.113.7", "203.0.113.8"]}}
    }
    install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    assert seed_endpoint(cluster.client, in_cluster=False) == "http://203.0.113.7:30080/api/"


def test_outside_a_nodeport_service_on_another_port_still_offers_port_80(cluster):
    values = {"master": {"service": {"port": 8080}}}
    created = install(cluster.client, manifests(values), NAMESPACE, ["node-b"])
    ports = {p["port"]: p for p in _service(created)["spec"]["ports"]}
    assert set(ports) == {8080, 80} and ports[80]["targetPort"] == "http"
    assert seed_endpoint(cluster.client, in_cluster=False) == (
        f"http://192.0.2.12:{ports[80]['nodePort']}/api/"
    )


def test_outside_a_clusterip_service_gives_its_cluster_ip_and_port(cluster):
    values = {"master": {"service": {"type": "ClusterIP"}}}
    created = install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    service = _service(created)
    assert seed_endpoint(cluster.client, in_cluster=False) == (
        f"http://{service['spec']['clusterIP']}:80/api/"
    )


def test_outside_a_loadbalancer_service_gives_its_ingress_address_and_port(cluster):
    from kubernetes import client

    values = {"master": {"service": {"type": "LoadBalancer"}}}
    install(cluster.client, manifests(values), NAMESPACE, ["node-a"])
    live = client.CoreV1Api(cluster.client).read_namespaced_service(
        f"{RELEASE}-mlbench-master", NAMESPACE
    )
    ingress = live.status.load_balancer.ingress[0].ip
    assert seed_endpoint(cluster.client, in_cluster=False) == f"http://{ingress}:80/api/"


# --------------------------------------------------------- the web server really binds port 80


def _as_user(uid: int, gid: int) -> list[str]:
    """Run as `uid`:`gid` with no supplementary group and no capability at all."""
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]


def _user_may_read(uid: int, gid: int, path: Path) -> bool:
    probe = [*_as_user(uid, gid), "/bin/sh", "-c", 'test -r "$0"', str(path)]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _user_may_run(uid: int, gid: int, python: str) -> bool:
    # The exec is the shell's, as the user with no capability left: setpriv's own exec
    # would still pass directories only root may enter.
    probe = [*_as_user(uid, gid), "/bin/sh", "-c", 'exec "$0" -c pass', python]
    return subprocess.run(probe, capture_output=True).returncode == 0


class WebContainer:
    """The chart's web container command (scripts/k8s/master-entrypoint.sh web), run the
    way the pod runs it: its own network namespace (with the pod's sysctl, or without), the
    pod's user and group, no capability, the container's environment from the chart.

    The image's virtualenv is this checkout's: its gunicorn, Django and packages. When this
    Python lives where the pod's user cannot enter (e.g. under /root/.pyenv), its
    installation is bind-mounted into a mount namespace of the container's own, at a place
    the user may reach; nothing changes outside.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.pod = _master_pod(manifests())["spec"]
        security = self.pod["securityContext"]
        self.uid, self.gid = security["runAsUser"], security["runAsGroup"]
        web = next(c for c in self.pod["containers"] if c["name"] == "web")
        self.port = int(next(p["containerPort"] for p in web["ports"] if p["name"] == "http"))
        self.sysctls = {s["name"]: s["value"] for s in security.get("sysctls", [])}
        self.prelude: list[str] = []
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        python = sys.executable
        library = ""
        if not _user_may_run(self.uid, self.gid, python):
            mounted = home / "python"
            mounted.mkdir(mode=0o755)
            self.prelude.append(f"mount --bind {sys.base_prefix} {mounted}")
            python = str(mounted / "bin" / version)
            library = f"LD_LIBRARY_PATH={mounted / 'lib'} "  # its RUNPATH names the old place
        # The checkout (with its virtualenv) too, when it sits where the user cannot enter
        # (e.g. a clone in a private temporary directory): the image has it readable.
        self.root = ROOT
        entrypoint = ROOT / "scripts" / "k8s" / "master-entrypoint.sh"
        if not _user_may_read(self.uid, self.gid, entrypoint):
            # Its directories one by one: the checkout's own directory may be private too.
            self.root = home / "src"
            self.root.mkdir(mode=0o755)
            for part in sorted(ROOT.iterdir()):
                if part.is_dir() and part.name != ".git":
                    (self.root / part.name).mkdir(mode=0o755)
                    self.prelude.append(f"mount --bind {part} {self.root / part.name}")
        packages = Path(sysconfig.get_paths()["purelib"])
        if packages.is_relative_to(ROOT):
            packages = self.root / packages.relative_to(ROOT)
        gunicorn = home / "gunicorn"  # the image's /opt/venv/bin/gunicorn
        gunicorn.write_text(f'#!/bin/sh\n{library}exec {python} -m gunicorn "$@"\n')
        gunicorn.chmod(0o755)
        self.env = {e["name"]: e["value"] for e in web["env"] if "value" in e}
        self.env.update(
            {
                "PATH": f"{home}:/usr/sbin:/usr/bin:/sbin:/bin",
                # master_wsgi.py (the image's /opt/mlbench), the package, the virtualenv.
                "PYTHONPATH": ":".join(
                    [str(self.root / "scripts" / "k8s"), str(self.root), str(packages)]
                ),
                "DJANGO_SETTINGS_MODULE": "mlbench_master.settings",
                # What the cluster fills in: the emptyDir, the Secrets, the downward API.
                "MLBENCH_HOME": str(home),
                "HOME": str(home),  # the image's user's home, where the emptyDir is
                "DATABASE_URL": f"sqlite:///{home}/db.sqlite3",
                "MLBENCH_SECRET_KEY": "only-for-this-test-" + "x" * 40,
                "MLBENCH_K8S_NAMESPACE": NAMESPACE,
                "MLBENCH_POD_IP": "127.0.0.1",
                "GUNICORN_WORKERS": "1",
            }
        )

    def start(self, *, with_sysctl: bool, log: Path) -> subprocess.Popen:
        steps = [*self.prelude, "ip link set lo up"]
        if with_sysctl:
            for name, value in self.sysctls.items():
                steps.append(f"echo {value} > /proc/sys/{name.replace('.', '/')}")
        as_user = " ".join(_as_user(self.uid, self.gid))
        steps.append(f"exec {as_user} {self.root / 'scripts' / 'k8s' / 'master-entrypoint.sh'} web")
        with log.open("wb") as out:
            return subprocess.Popen(
                ["unshare", "--net", "--mount", "sh", "-c", " && ".join(steps)],
                env=self.env,
                cwd=self.home,  # the pod's working directory is its own, not this checkout
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def _get_in(pid: int, port: int) -> str:
    """GET /api/health/ on 127.0.0.1:`port` inside the network namespace of `pid`."""
    probe = (
        "import sys, urllib.request\n"
        f"r = urllib.request.Request('http://127.0.0.1:{port}/api/health/', "
        "headers={'Host': 'localhost'})\n"
        "try:\n"
        "    print(urllib.request.urlopen(r, timeout=5).status)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code)\n"
        "except OSError as e:\n"
        "    print('down', e)\n"
    )
    out = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip() or out.stderr.strip()


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@pytest.fixture
def container_home():
    home = Path(tempfile.mkdtemp(prefix="mlbench-web-", dir="/tmp"))
    home.chmod(0o777)  # the pod's emptyDir, writable by its user
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_the_web_container_serves_on_port_80_as_its_user_thanks_to_the_sysctl(
    container_home, tmp_path
):
    needed = [t for t in ("unshare", "setpriv", "nsenter", "ip", "mount") if not shutil.which(t)]
    if needed:
        _missing(f"needs {', '.join(needed)} (util-linux, iproute2) to run the web container")
    if os.geteuid() != 0:
        _missing("needs root to make the container's namespaces and switch to the pod's user")
    web = WebContainer(container_home)
    assert web.port == 80 and web.env["MLBENCH_WEB_PORT"] == "80"
    assert web.sysctls == {SYSCTL: "80"}

    # Without the sysctl, the same command as the same user cannot have port 80.
    refused = web.start(with_sysctl=False, log=tmp_path / "refused.log")
    try:
        refused.wait(90)
    finally:
        _stop(refused)
    text = (tmp_path / "refused.log").read_text()
    assert refused.returncode != 0, text
    assert "('0.0.0.0', 80) failed: [Errno 13] Permission denied" in text, text
    assert "Booting worker" not in text, text

    # With it, gunicorn binds port 80 and Django answers there.
    served = web.start(with_sysctl=True, log=tmp_path / "served.log")
    try:
        answer = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and served.poll() is None:
            answer = _get_in(served.pid, web.port)
            if answer.isdigit():
                break
            time.sleep(0.5)
        log = (tmp_path / "served.log").read_text()
        assert answer == "200", f"{answer}\n{log}"
        assert "Listening at: http://0.0.0.0:80 " in log
        assert "ERROR" not in log, log
        status = _status_of(served.pid)  # gunicorn's master process, which bound the port
        assert status["Uid"].split()[:2] == [str(web.uid)] * 2
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    finally:
        _stop(served)
