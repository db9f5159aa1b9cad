"""The client and CLI tests talk to one live embedded master (the real launcher), or, where
they need runs stored as given rather than trained, to pytest-django's live server
(`stored_cli`)."""

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_worker.client.cli import main
from tests.e2e.live import start_master
from tests.results.conftest import Maker


@pytest.fixture(scope="session")
def master(postgres_url, tmp_path_factory):
    live = start_master(postgres_url, tmp_path_factory.mktemp("mlbench-client-home"))
    yield live
    live.down()


@pytest.fixture
def stored_cli(live_server, settings, tmp_path, monkeypatch):
    """`stored_cli(*argv)` runs the `mlbench` command against the live server as a staff
    user; `.api` is that user's API client and `.maker` stores runs and points through it
    (use with `django_db(transaction=True)`, so the server sees the rows)."""
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_PUBLIC_READ = False
    token = issue_user_token("root", create_user=True, superuser=True)
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> int:
        return main(["--url", live_server.url, "--token", token, *argv])

    run.api = APIClient()
    run.api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    run.maker = Maker(run.api)
    return run
