"""What can be checked of the images and their scripts without Docker.

The image builds themselves are exercised by `make e2e-kind` (docs/installation.rst);
scripts/k8s/check-image-install.sh runs their Python install in scratch virtualenvs.
"""

from __future__ import annotations

import base64
import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kubernetes.chart import RELEASE, find, manifests

ROOT = Path(__file__).resolve().parents[2]


def _dockerignore_allows(path: str) -> bool:
    """Docker's rule for our .dockerignore: the last matching pattern decides."""
    allowed = True
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or (
            pattern.startswith("**/") and fnmatch.fnmatch(parts[-1], pattern[3:])
        ):
            allowed = negate
    return allowed


@pytest.mark.parametrize("dockerfile", ["Dockerfile.master", "Dockerfile.worker"])
def test_every_copied_file_exists_and_reaches_the_build_context(dockerfile):
    text = (ROOT / dockerfile).read_text()
    copies = re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.MULTILINE)
    assert copies
    for line in copies:
        for source in line.split()[:-1]:
            assert (ROOT / source).exists(), f"{dockerfile}: {source} does not exist"
            assert _dockerignore_allows(source), f"{dockerfile}: .dockerignore excludes {source}"
    assert "install-python.sh" in text  # the one install recipe of both images


def test_entry_points_are_valid_shell():
    for script in ("master-entrypoint.sh", "worker-entrypoint.sh", "install-python.sh"):
        subprocess.run(["sh", "-n", str(ROOT / "scripts" / "k8s" / script)], check=True)
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "k8s" / "e2e-kind.sh")], check=True)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_the_key_the_chart_generates_is_usable_by_openssh(tmp_path):
    """The worker entry point derives authorized_keys with `ssh-keygen -y` from the key
    helm's genPrivateKey made: OpenSSH must read that PEM format."""
    secret = find(manifests(), "Secret", f"{RELEASE}-mlbench-ssh")
    key = tmp_path / "id_mlbench"
    key.write_bytes(base64.b64decode(secret["data"]["id_ecdsa"]))
    key.chmod(0o600)
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True
    ).stdout
    assert public.startswith("ecdsa-sha2-nistp256 ")
