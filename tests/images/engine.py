"""The container engine of the image tests: a private dockerd (scripts/images/engine.sh)
that the test session starts when none answers and stops afterwards, and the two images
built by scripts/images/build.py (cached in the engine's data root between sessions).

On CI a missing capability is a failure, never a skip: the set-up installs what it needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "scripts" / "images" / "engine.sh"
SOCKET = "unix:///run/mlbench-docker/docker.sock"
MASTER = "mlbench_master:latest"
WORKER = "mlbench_worker:latest"


def unavailable(reason: str) -> None:
    """Skip on a developer machine; fail under CI, where every capability must be there."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def docker(
    *args: str, check: bool = True, timeout: float = 120, **kw
) -> subprocess.CompletedProcess:
    """The docker CLI against the tests' engine; output as text."""
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, **kw
    )
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr.strip()[-800:]}")
    return result


def answers() -> bool:
    return docker("version", "--format", "{{.Server.Version}}", check=False).returncode == 0


def start_engine() -> bool:
    """Point DOCKER_HOST at an engine that answers; True when this call started it."""
    if os.environ.get("DOCKER_HOST") and answers():
        return False
    os.environ["DOCKER_HOST"] = SOCKET
    if answers():
        return False
    if os.geteuid() != 0:
        unavailable("no Docker engine answers and starting one needs root")
    result = subprocess.run(["bash", str(ENGINE), "start"], capture_output=True, text=True)
    if result.returncode != 0:
        unavailable(f"cannot start a Docker engine: {result.stderr.strip()[-600:]}")
    return True


def stop_engine() -> None:
    subprocess.run(["bash", str(ENGINE), "stop"], capture_output=True, text=True, check=True)


def build_images() -> None:
    """Both images from this checkout, on the local Debian base (no registry needed), with
    this machine's pip configuration and CA as build secrets. Cached layers make a second
    build take seconds; a changed source file rebuilds from its COPY on."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/images/build.py"), "--base", "local",
         "--pip-conf", "host", "--quiet"],
        capture_output=True, text=True, timeout=1500, cwd=ROOT,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"the images did not build:\n{result.stderr[-3000:]}")
