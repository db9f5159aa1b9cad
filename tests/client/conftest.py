"""The client and CLI tests talk to one live embedded master (the real launcher)."""

import pytest

from tests.e2e.live import start_master


@pytest.fixture(scope="session")
def master(postgres_url, tmp_path_factory):
    live = start_master(postgres_url, tmp_path_factory.mktemp("mlbench-client-home"))
    yield live
    live.down()
