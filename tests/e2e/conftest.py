"""The e2e tests share one embedded master (the real launcher) on the session's PostgreSQL."""

import pytest

from tests.e2e.live import start_master


@pytest.fixture(scope="session")
def master(postgres_url, tmp_path_factory):
    live = start_master(postgres_url, tmp_path_factory.mktemp("mlbench-home"))
    yield live
    live.down()


@pytest.fixture
def idle_master(master):
    """The master with no active run (a test that failed half-way may have left one)."""
    for run in master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            master.delete(f"/api/runs/{run['id']}/")
    return master
