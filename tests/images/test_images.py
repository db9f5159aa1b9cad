"""The two images, built from this checkout and run: the master serves /api/health/ on port
80 as a non-root user (as the chart runs it: its own network namespace, where the pod's
sysctl lets unprivileged processes bind from port 80) and holds no torch; the worker runs
the benchmark's CLI, mpirun and sshd (a real ssh login with the release's kind of key)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from tests.images.engine import docker

# The first test of a session may build the images (minutes on a fresh machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture
def container_names():
    names: list[str] = []
    yield names
    for name in names:
        docker("rm", "-f", name, check=False)


def _wait_exec(name: str, command: list[str], limit: float = 60) -> str:
    deadline = time.monotonic() + limit
    while True:
        result = docker("exec", name, *command, check=False)
        if result.returncode == 0:
            return result.stdout
        if time.monotonic() > deadline:
            logs = docker("logs", "--tail", "30", name, check=False)
            raise AssertionError(f"{command} never worked: {result.stderr}\n{logs.stderr}")
        time.sleep(0.5)


HEALTH = (
    "import json, urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:80/api/health/', timeout=5).read().decode())"
)


def test_master_serves_health_on_port_80_as_non_root_and_has_no_torch(images, container_names):
    master, _ = images
    name = f"mlbench-test-master-{uuid.uuid4().hex[:6]}"
    container_names.append(name)
    docker(
        "run", "-d", "--name", name, "--network", "none", "--read-only",
        "--tmpfs", "/var/lib/mlbench:uid=10001", "--tmpfs", "/tmp",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--sysctl", "net.ipv4.ip_unprivileged_port_start=80",
        "-e", "MLBENCH_WEB_PORT=80", "-e", "MLBENCH_SECRET_KEY=image-test",
        "-e", "DATABASE_URL=sqlite:////var/lib/mlbench/db.sqlite3",
        master, "web",
    )  # fmt: skip
    body = json.loads(_wait_exec(name, ["python", "-c", HEALTH]))
    assert body == {"status": "ok", "database": "ok"}
    # The server itself (PID 1, gunicorn) runs as the image's user, not root.
    status = docker("exec", name, "cat", "/proc/1/status").stdout
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    assert uid == "10001"
    assert "gunicorn" in docker("exec", name, "cat", "/proc/1/cmdline").stdout
    no_torch = docker(
        "run", "--rm", "--network", "none", master,
        "python", "-c", "import importlib.util as u; print(u.find_spec('torch'))",
    )  # fmt: skip
    assert no_torch.stdout.strip() == "None"


def test_worker_runs_the_benchmark_cli_mpirun_and_sshd(images, container_names, tmp_path):
    _, worker = images
    assert "resnet20-cifar10" in docker(
        "run", "--rm", "--network", "none", "--entrypoint", "python", worker,
        "-m", "mlbench_worker", "--help",
    ).stdout  # fmt: skip
    version = docker("run", "--rm", "--network", "none", "--entrypoint", "mpirun", worker,
                     "--version").stdout  # fmt: skip
    assert "Open MPI" in version or "mpirun" in version
    # The chart's key kind (ECDSA), mounted read-only as the Secret is.
    keys = tmp_path / "ssh"
    keys.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(keys / "id_ecdsa")], check=True
    )
    name = f"mlbench-test-worker-{uuid.uuid4().hex[:6]}"
    container_names.append(name)
    docker(
        "run", "-d", "--name", name, "--network", "none", "--cap-add", "NET_ADMIN",
        "-v", f"{keys}:/etc/mlbench/ssh:ro", "-e", "MLBENCH_SSH_KEY=/etc/mlbench/ssh/id_ecdsa",
        worker,
    )  # fmt: skip
    # A real login through the worker's sshd and ssh configuration, as mpirun makes one.
    out = _wait_exec(name, ["ssh", "127.0.0.1", "echo $PATH; command -v prted"], limit=30)
    assert "/opt/venv/bin" in out and out.strip().endswith("/opt/venv/bin/prted")


def test_a_worker_without_the_ssh_key_says_what_to_mount(images):
    _, worker = images
    result = docker("run", "--rm", "--network", "none", worker, check=False)
    assert result.returncode != 0
    assert "no ssh key at /etc/mlbench/ssh/id_ecdsa" in result.stderr
