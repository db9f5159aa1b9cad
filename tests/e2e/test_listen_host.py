"""`up --host`: the embedded master's web server where workers on other hosts reach it (a
Slurm cluster's nodes post to a login node), and only there; requests naming the host of
MLBENCH_MASTER_URL are served, others refused by Django's host check.

127.0.0.2 stands for the login node's address: Linux answers the whole 127/8 on loopback,
so a server on it is not reachable at 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import requests

from tests.e2e.live import start_master
from tests.services import free_port

pytestmark = pytest.mark.slow
ADDRESS = "127.0.0.2"


@pytest.fixture
def listening_master(postgres_url, tmp_path):
    url_port = free_port()  # only named in the URL the workers would use
    master = start_master(
        postgres_url, tmp_path / "home", host=ADDRESS,
        env_extra={"MLBENCH_MASTER_URL": f"http://login1.example.org:{url_port}"},
    )  # fmt: skip
    yield master
    master.down()


def test_the_master_listens_where_it_was_asked_and_serves_its_workers_host(listening_master):
    master = listening_master
    assert requests.get(f"{master.url}/api/health/", timeout=10).status_code == 200
    with pytest.raises(OSError):  # not on 127.0.0.1
        socket.create_connection(("127.0.0.1", master.port), timeout=2).close()
    # The workers' requests name MLBENCH_MASTER_URL's host; a stranger's are refused.
    named = {"Host": "login1.example.org"}
    assert requests.get(f"{master.url}/api/health/", headers=named, timeout=10).status_code == 200
    stranger = {"Host": "elsewhere.example.org"}
    refused = requests.get(f"{master.url}/api/health/", headers=stranger, timeout=10)
    assert refused.status_code == 400
    assert master.state()["url"] == master.url
    status = master.cli("status")
    assert master.url in status.stdout, status.stdout + status.stderr


def test_a_port_in_use_on_that_address_is_said(tmp_path):
    with socket.socket() as taken:
        taken.bind((ADDRESS, 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "MLBENCH_HOME": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-m", "mlbench_master", "up", "--host", ADDRESS, "--port", str(port)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2
    assert f"port {port} on {ADDRESS} is in use" in done.stderr


def test_an_address_this_machine_lacks_is_said_as_such(tmp_path):
    # TEST-NET-1 (RFC 5737): never an address of this machine.
    env = {**os.environ, "MLBENCH_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "mlbench_master", "up", "--host", "192.0.2.7"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--host 192.0.2.7 is not an address of this machine" in done.stderr
    assert "in use" not in done.stderr
