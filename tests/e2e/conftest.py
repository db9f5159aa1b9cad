"""The e2e tests share one embedded master (the real launcher) on the session's PostgreSQL."""

import pytest

from tests.e2e.live import start_master
from tests.worker.helpers import SPARK_JVM_ENV


@pytest.fixture(scope="session")
def master(postgres_url, tmp_path_factory):
    # Its runs' ranks inherit its environment: the Spark runs' JVMs get the short runs'
    # options (C1 only, the serial collector; tests/worker/helpers.py). Other runs ignore them.
    live = start_master(
        postgres_url, tmp_path_factory.mktemp("mlbench-home"), env_extra=SPARK_JVM_ENV
    )
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
