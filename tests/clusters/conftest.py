"""A moto server for the AWS provider's tests: a real process speaking AWS's APIs on
loopback, so boto3 runs end to end (signing, serialising, parsing, waiters) and only the
other end is an emulator.

Fixture:
- `moto_server` (session): the server's URL (http://127.0.0.1:PORT), started with AWS's
  managed IAM policies loaded (MOTO_IAM_LOAD_MANAGED_POLICIES=true, else attaching
  AmazonEKSClusterPolicy fails); stopped afterwards. Without moto it skips, or fails under
  CI=true, where a skipped provider test would hide that it never ran.
"""

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def _missing(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}; CI must run the AWS provider's tests")
    pytest.skip(why)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        _missing("moto's server is not installed (pip install 'moto[server]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path_factory.mktemp("moto") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail(f"moto's server exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto's server did not answer in 60 s: {log_path.read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
