"""The master pod answers on port 80, where the original client looks for it, without root.

The chart runs it as a non-root user and lowers `net.ipv4.ip_unprivileged_port_start`
for its pod. That this really works is shown by starting the chart's web container command
(scripts/k8s/master-entrypoint.sh, real gunicorn and Django) in a network namespace of its
own, as the chart's user, with and without the chart's sysctl.
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

import pytest

from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests

ROOT = Path(__file__).resolve().parents[2]
SYSCTL = "net.ipv4.ip_unprivileged_port_start"


def _master_pod(objects: list[dict]) -> dict:
    return find(objects, "Deployment", f"{RELEASE}-mlbench-master")["spec"]["template"]


def _missing(why: str) -> None:
    """Skip on a developer's machine; in CI a missing capability must fail, not pass."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


# -------------------------------------------------------------------------------- the chart


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
            # As the readiness probe does: a 503 (the database not answering yet on a loaded
            # machine) is asked again; only the deadline ends the wait.
            if answer == "200":
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
