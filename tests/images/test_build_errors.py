"""A build that cannot work says what to fix, in words: no engine, a base image that cannot
be pulled, a package index that cannot be reached or lacks the packages, a certificate
refused. Each is made to happen for real (a socket nobody serves, a registry name that
cannot resolve, a port nothing listens on, an empty index, an HTTPS index with a
certificate nobody vouched for). Indexes and certificates are checked before the build
starts; what only the build can find out is read from its log."""

from __future__ import annotations

import http.server
import os
import ssl
import subprocess
import sys
import threading

import pytest

from tests.images.engine import ROOT

# The first test of a session may build the images (minutes on a fresh machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BUILD = [sys.executable, str(ROOT / "scripts/images/build.py")]


def _build(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*BUILD, "master", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def _pip_conf(tmp_path, index: str):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {index}\nretries = 0\ntimeout = 5\n")
    return str(conf)


def test_no_engine_names_the_socket_and_how_to_start_one(tmp_path):
    socket = f"unix://{tmp_path}/nobody.sock"
    result = _build(env={"DOCKER_HOST": socket})
    assert result.returncode == 1
    assert f"no Docker engine answers at {socket}" in result.stderr
    assert "scripts/images/engine.sh start" in result.stderr


def test_an_unreachable_base_image_points_to_the_local_base(docker_engine):
    result = _build(
        "--base", "registry.invalid/python:3.11-slim", "--assets", "context", "--pip-conf", "host"
    )
    assert result.returncode == 1
    assert "a base image cannot be pulled" in result.stderr
    assert "BASE=local" in result.stderr


def test_an_unreachable_index_points_to_the_pip_configuration(docker_engine, tmp_path):
    result = _build(
        "--base",
        "local",
        "--no-cache",
        "--pip-conf",
        _pip_conf(tmp_path, "http://127.0.0.1:9/simple"),
    )
    assert result.returncode == 1
    assert "the package index http://127.0.0.1:9/simple cannot be reached" in result.stderr
    assert "PIP_CONF=host" in result.stderr


def test_an_index_without_the_packages_fails_the_build_with_what_to_fix(docker_engine, tmp_path):
    """The index answers (the check before the build passes) but holds nothing: pip inside
    the build finds no candidate, and its log is read."""
    (tmp_path / "simple").mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path)),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/simple"
        result = _build("--base", "local", "--no-cache", "--pip-conf", _pip_conf(tmp_path, index))
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1
    assert "pip could not get the packages it needs from its index" in result.stderr
    assert "-- the end of the build's log:" in result.stderr


@pytest.fixture
def untrusted_index(tmp_path):
    """An HTTPS index on 127.0.0.1 whose certificate no CA bundle holds."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_a_refused_certificate_points_to_the_ca_bundle(docker_engine, tmp_path, untrusted_index):
    result = _build(
        "--base", "local", "--no-cache", "--pip-conf", _pip_conf(tmp_path, untrusted_index)
    )
    assert result.returncode == 1
    assert "presents a certificate pip will refuse" in result.stderr
    assert "CA_BUNDLE=" in result.stderr
