"""The contenders of bench_api.py's metric ingestion, beside the points our clients post:
an MLflow tracking server (its REST log-batch) and PostgreSQL's own COPY of the same rows.
Each is driven the same way: CLIENTS threads, batches of BATCH points (`concurrently`)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests

from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 4
BATCH = 1000
METRICS = 10
BATCHES_PER_CLIENT = int(os.environ.get("BENCH_API_BATCHES", "40"))
MLFLOW = ROOT / ".venv-mlflow" / "bin" / "mlflow"


def points(run_id: int, tag: str, c: int, b: int) -> list[dict]:
    """One batch of BATCH points as a worker posts them (uids unique to tag, client, batch)."""
    return [
        {
            "run_id": run_id,
            "name": f"m{i % METRICS}",
            "value": i * 0.5,
            "date": "2026-01-01T00:00:00.000001Z",
            "cumulative": False,
            "metadata": {"epoch": 1.25, "step": i, "elapsed": 12.5},
            "uid": f"{tag}-{c}-{b}-{i}",
        }
        for i in range(BATCH)
    ]


def concurrently(send, batches: int) -> dict:  # noqa: ANN001
    """CLIENTS threads each call send(client, batch) for its batches; the points/s of all."""
    latencies: list[float] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for b in range(batches):
            t = time.perf_counter()
            send(c, b)
            with lock:
                latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client, range(CLIENTS)))
    elapsed = time.perf_counter() - start
    total = CLIENTS * batches * BATCH
    return {
        "points": total,
        "seconds": elapsed,
        "points_per_s": total / elapsed,
        "batch_p50_ms": statistics.median(latencies) * 1000,
    }


def ingest(url: str, token: str, run_id: int, tag: str) -> dict:
    """4 clients each post BATCHES_PER_CLIENT batches of 1,000 points (bodies made first)."""
    bodies = [
        [json.dumps(points(run_id, tag, c, b)).encode() for b in range(BATCHES_PER_CLIENT)]
        for c in range(CLIENTS)
    ]
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    sessions = [requests.Session() for _ in range(CLIENTS)]

    def send(c: int, b: int) -> None:
        r = sessions[c].post(f"{url}/api/metrics/", data=bodies[c][b], headers=headers, timeout=120)
        r.raise_for_status()

    try:
        return concurrently(send, BATCHES_PER_CLIENT)
    finally:
        for session in sessions:
            session.close()


def copy_floor(db_url: str, run_id: int, tag: str) -> dict:
    """The same points as `ingest`, written by COPY into api_metric from CLIENTS connections,
    one COPY per batch (each its own transaction, as each POST is)."""
    import datetime as dt

    import psycopg

    date = dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)
    rows = [
        [
            [
                (
                    p["run_id"],
                    None,
                    p["name"],
                    p["value"],
                    date,
                    False,
                    json.dumps(p["metadata"]),
                    p["uid"],
                )
                for p in points(run_id, tag, c, b)
            ]  # fmt: skip
            for b in range(BATCHES_PER_CLIENT)
        ]
        for c in range(CLIENTS)
    ]
    conns = [psycopg.connect(db_url, autocommit=True) for _ in range(CLIENTS)]
    columns = "run_id, pod_name, name, value, date, cumulative, metadata, uid"

    def send(c: int, b: int) -> None:
        with conns[c].cursor() as cur, cur.copy(f"COPY api_metric ({columns}) FROM STDIN") as cp:
            for row in rows[c][b]:
                cp.write_row(row)

    try:
        return concurrently(send, BATCHES_PER_CLIENT)
    finally:
        for conn in conns:
            conn.close()


class MlflowServer:
    """An MLflow tracking server (4 workers) on its own database of the same PostgreSQL, with
    one experiment and one run to log into."""

    def __init__(self, db_url: str) -> None:
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE mlflow")
        store = db_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = tempfile.TemporaryDirectory()  # its artifact root lands in its cwd
        self.log = tempfile.TemporaryFile()
        argv = [str(MLFLOW), "server", "--backend-store-uri", f"{store}/mlflow",
                "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(CLIENTS)]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, cwd=self.folder.name, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 600  # its first start creates its tables
        while True:
            try:
                if requests.get(self.url + "/health", timeout=30).ok:
                    break
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self.log.seek(0)
                raise RuntimeError(f"mlflow did not start: {self.log.read()[-2000:]!r}")
            time.sleep(0.5)
        api = self.url + "/api/2.0/mlflow"
        experiment = requests.post(f"{api}/experiments/create", json={"name": "bench"}, timeout=60)
        experiment.raise_for_status()
        made = requests.post(
            f"{api}/runs/create", json={"experiment_id": experiment.json()["experiment_id"]},
            timeout=60,
        )  # fmt: skip
        made.raise_for_status()
        self.run_id = made.json()["run"]["info"]["run_id"]

    def ingest(self, tag: int, batches: int) -> dict:
        """The points of `ingest` as MLflow metrics (key, value, timestamp, step; a step of
        its own for each point, as MLflow keeps one value per key, step and time), posted
        by CLIENTS clients in log-batch requests of 1,000."""
        bodies = [
            [
                json.dumps({"run_id": self.run_id, "metrics": [
                    {"key": p["name"], "value": p["value"], "timestamp": 1767225600000,
                     "step": ((tag * CLIENTS + c) * batches + b) * BATCH + i}
                    for i, p in enumerate(points(0, "", c, b))
                ]}).encode()
                for b in range(batches)
            ]
            for c in range(CLIENTS)
        ]  # fmt: skip
        sessions = [requests.Session() for _ in range(CLIENTS)]
        url = f"{self.url}/api/2.0/mlflow/runs/log-batch"
        headers = {"Content-Type": "application/json"}

        def send(c: int, b: int) -> None:
            sessions[c].post(
                url, data=bodies[c][b], headers=headers, timeout=600
            ).raise_for_status()

        try:
            return concurrently(send, batches)
        finally:
            for session in sessions:
                session.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.folder.cleanup()
