"""A live embedded master of a given checkout: `python -m mlbench_master up --detach` run
with cwd=TREE and PYTHONPATH=SHIM:TREE, so that the tree's own master, worker and CLI code
runs (the venv's editable install is only a fall-back finder, after PYTHONPATH).

PostgreSQL comes from the project's own helper (tests/services.postgres_server); the
embedded master starts its own Redis, RQ workers, collector and web server.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.services import free_port

SHIM = Path(__file__).with_name("shim")
NODE_MODULES = Path(__file__).resolve().parents[2] / "node_modules"


@dataclass
class Master:
    tree: Path
    home: Path
    env: dict[str, str]
    port: int
    token: str = ""
    session: requests.Session = field(default_factory=requests.Session)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launcher(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mlbench_master", *args],
            env=self.env, cwd=self.tree, capture_output=True, text=True, timeout=240,
            check=check,
        )  # fmt: skip

    def up(self) -> None:
        done = self.launcher("up", "--detach", "--port", str(self.port), check=False)
        if done.returncode != 0:
            logs = ""
            for log in sorted((self.home / "logs").glob("*.log")):
                logs += f"\n== {log.name}\n" + log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"mlbench up failed: {done.stdout}{done.stderr}{logs}")
        self.token = (self.home / "token").read_text().strip()
        self.session.headers["Authorization"] = f"Token {self.token}"

    def down(self) -> None:
        self.launcher("down", check=False)

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], env=self.env, cwd=self.tree,
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return done.stdout

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mlbench_worker.client.cli", *args],
            env=self.env, cwd=self.tree, capture_output=True, text=True, timeout=240,
        )  # fmt: skip

    # -- HTTP, with this master's staff token unless `headers` says otherwise
    def request(self, method: str, path: str, **kw: Any) -> requests.Response:
        return self.session.request(method, self.url + path, timeout=120, **kw)

    def get(self, path: str, **params: Any) -> requests.Response:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any) -> requests.Response:
        return self.request("POST", path, json=body)

    def json(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path} answered {response.status_code}: {response.text}")
        return response.json()

    def run(self, run_id: int) -> dict[str, Any]:
        return self.json(f"/api/runs/{run_id}/")

    def wait(self, check, timeout: float, what: str, every: float = 0.5) -> Any:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not after {timeout} s")
            time.sleep(every)


def start_master(tree: Path, postgres_url: str, home: Path, shim: dict[str, Any]) -> Master:
    """A fresh database on `postgres_url`'s server and an embedded master of `tree` on it."""
    import psycopg

    dbname = f"eq_{secrets.token_hex(4)}"
    server, _ = postgres_url.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("MLBENCH_", "DJANGO_")) or name in ("REDIS_URL", "DATABASE_URL"):
            del env[name]
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        MLBENCH_HOME=str(home),
        DATABASE_URL=f"{server}/{dbname}",
        MLBENCH_LOCAL_WORKERS="2",
        MLBENCH_SECRET_KEY=secrets.token_urlsafe(32),
        MLBENCH_NODE_MODULES=str(NODE_MODULES),
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=f"{SHIM}{os.pathsep}{tree}",
        PYTHONHASHSEED="0",
        MLBENCH_AUDIT_SAMPLE="250",  # as tests/e2e: the ONNX audits on 250 examples
        MLBENCH_EQ_SHIM=json.dumps(shim),
    )
    master = Master(tree=tree, home=home, env=env, port=free_port())
    master.up()
    return master
