"""A live embedded master for end-to-end tests: the real launcher, on PostgreSQL.

`python -m mlbench_master up --detach` starts what a user gets (Redis, RQ workers, the
collector, waitress) with a fresh database on the session's PostgreSQL and its own
MLBENCH_HOME; tests talk to it over HTTP only, like the CLI does.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LiveMaster:
    url: str
    token: str
    home: Path
    env: dict[str, str]
    database_url: str
    port: int
    host: str = ""  # `up --host`; "" listens on loopback, the default

    # -- processes
    def launcher(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mlbench_master", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=check,
        )

    def up(self) -> None:
        listen = ("--host", self.host) if self.host else ()
        done = self.launcher("up", "--detach", "--port", str(self.port), *listen, check=False)
        if done.returncode != 0:
            logs = ""
            for log in sorted((self.home / "logs").glob("*.log")):
                logs += f"\n== {log.name}\n" + log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"mlbench up failed: {done.stdout}{done.stderr}{logs}")
        self.token = (self.home / "token").read_text().strip()

    def down(self) -> None:
        self.launcher("down", check=False)

    def state(self) -> dict[str, Any]:
        return json.loads((self.home / "master.json").read_text())

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mlbench_worker.client.cli", *args],
            env=env or self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )

    # -- HTTP
    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.url + path, headers=self.headers, timeout=30, **kw)

    def post(self, path: str, body: Any) -> requests.Response:
        return requests.post(self.url + path, json=body, headers=self.headers, timeout=30)

    def delete(self, path: str) -> requests.Response:
        return requests.delete(self.url + path, headers=self.headers, timeout=60)

    def create_run(self, **fields: Any) -> dict[str, Any]:
        body = {"name": "e2e", "num_workers": 2, "num_cpus": 1, **fields}
        response = self.post("/api/runs/", body)
        assert response.status_code == 201, response.text
        return response.json()

    def run(self, run_id: int) -> dict[str, Any]:
        response = self.get(f"/api/runs/{run_id}/")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_state(
        self, run_id: int, states: tuple[str, ...], timeout: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run["state"] in states:
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {run['state']} after {timeout} s: {run}")
            time.sleep(0.25)

    def wait_audit(self, run_id: int, timeout: float = 180) -> dict[str, Any]:
        """The ONNX audit of the run's model (`evaluation.audit`) once it is not pending."""
        deadline = time.monotonic() + timeout
        while True:
            audit = self.run(run_id)["evaluation"]["audit"]
            if audit["status"] != "pending":
                return audit
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id}'s audit still pending after {timeout} s")
            time.sleep(0.5)

    def logs(self, run_id: int) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self.get(f"/api/runs/{run_id}/logs/", params={"offset": offset}).json()
            if not page["chunks"]:
                return chunks
            chunks += page["chunks"]
            offset = page["next_offset"]

    def log_text(self, run_id: int) -> str:
        return "".join(c["text"] for c in self.logs(run_id))

    def rank_processes(self, run_id: int) -> list:
        from mlbench_master.cluster.local import launch_processes

        return launch_processes(self.home, run_id=run_id)

    def ranks(self, run_id: int) -> dict[int, Any]:
        """The run's rank processes (psutil) by their MPI rank: the Python processes mpirun
        started, not the processes they start in turn (which inherit the rank's variables:
        a Spark rank's JVMs and its executors' Python workers)."""
        import contextlib

        import psutil

        ranks = {}
        for proc in self.rank_processes(run_id):
            with contextlib.suppress(psutil.Error):
                env = proc.environ()
                if "OMPI_COMM_WORLD_RANK" in env and "python" in proc.name():
                    if not _started_by_a_rank_program(proc):
                        ranks[int(env["OMPI_COMM_WORLD_RANK"])] = proc
        return ranks


def _started_by_a_rank_program(proc: Any) -> bool:
    """Whether a Python or Java process of the rank (carrying its variables) is among
    `proc`'s ancestors: then `proc` was started by the rank's program, not by mpirun and
    its watcher (a shell)."""
    import psutil

    try:
        parent = proc.parent()
        while parent is not None and "OMPI_COMM_WORLD_RANK" in parent.environ():
            if parent.name() == "java" or "python" in parent.name():
                return True
            parent = parent.parent()
    except psutil.Error:
        return False
    return False


E2E_AUDIT_SAMPLE = 250


def start_master(
    postgres_url: str, home: Path, host: str = "", env_extra: dict[str, str] | None = None
) -> LiveMaster:
    """A fresh database on the session's PostgreSQL and an embedded master on it, listening
    on `host` (default loopback), with `env_extra` in its environment."""
    import psycopg

    dbname = f"e2e_{secrets.token_hex(4)}"
    server, _ = postgres_url.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    database_url = f"{server}/{dbname}"
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("MLBENCH_", "DJANGO_")) or name in ("REDIS_URL", "DATABASE_URL"):
            del env[name]
    bindir = str(Path(sys.executable).parent)
    env.update(
        MLBENCH_HOME=str(home),
        DATABASE_URL=database_url,
        MLBENCH_LOCAL_WORKERS="2",
        MLBENCH_SECRET_KEY=secrets.token_urlsafe(32),
        PATH=bindir + os.pathsep + env.get("PATH", ""),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=str(ROOT),
        # The ONNX audits of the runs' models on 250 test examples, not 2,000: a fraction
        # of the time (the default is audited once, in tests/evaluation/test_model_audit.py).
        MLBENCH_AUDIT_SAMPLE=str(E2E_AUDIT_SAMPLE),
        **(env_extra or {}),
    )
    port = free_port()
    master = LiveMaster(
        url=f"http://{host or '127.0.0.1'}:{port}",
        token="",
        home=home,
        env=env,
        database_url=database_url,
        port=port,
        host=host,
    )
    master.up()
    return master


def wait_until(check, timeout: float, message: str) -> None:
    """Poll `check` every 0.2 s until it is true; fail with `message` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} (after {timeout} s)")
        time.sleep(0.2)


def script(source: str) -> str:
    """A custom_image_command running `source` with the venv's Python (under mpirun)."""
    path = Path(__file__).with_name("scripts") / source
    return f"python {path}"
