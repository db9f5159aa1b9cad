"""The e2e tests share one embedded master (the real launcher) on the session's PostgreSQL."""

import pytest

from tests.e2e.live import start_master
from tests.worker.helpers import FLINK_JVM_ENV, FLINK_PYTHON, SPARK_JVM_ENV


@pytest.fixture(scope="session")
def master(postgres_url, tmp_path_factory):
    # Its runs' ranks inherit its environment: the Spark and Flink runs' JVMs get the short
    # runs' options (C1 only, the serial collector; tests/worker/helpers.py). Other runs
    # ignore them. Flink runs start their ranks with Flink's own Python (.venv-flink).
    extra = {**SPARK_JVM_ENV, **FLINK_JVM_ENV, "MLBENCH_FLINK_PYTHON": FLINK_PYTHON}
    live = start_master(postgres_url, tmp_path_factory.mktemp("mlbench-home"), env_extra=extra)
    yield live
    live.down()


@pytest.fixture
def idle_master(master):
    """The master with no active or queued run (a test that failed half-way may have left
    one); the queued ones go first, or deleting the active one would start them."""
    listed = master.get("/api/runs/").json()
    for states in (("QUEUED",), ("INITIALIZED", "STARTED")):
        for run in listed:
            if run["state"] in states:
                master.delete(f"/api/runs/{run['id']}/")
    return master
