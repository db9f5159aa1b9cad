"""Fixtures for the API tests: users with tokens, API clients, runs."""

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle


@pytest.fixture(autouse=True)
def _api_settings(settings, tmp_path):
    # Our own MLBENCH_HOME: the local driver's cancel() only touches processes under it.
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    settings.MLBENCH_PODS_REFRESH_SECONDS = 0
    settings.MLBENCH_MAX_WORKERS = 4
    settings.MLBENCH_MAX_CPUS = 2.0
    settings.MLBENCH_MAX_BANDWIDTH = 1000
    settings.MLBENCH_MAX_GPUS = 0


@pytest.fixture
def user_token(db):
    return issue_user_token("alice", create_user=True)


@pytest.fixture
def api(user_token):
    """A client authenticated with a user token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {user_token}")
    return client


@pytest.fixture
def staff_token(db):
    """A staff user's token (what `mlbench_token --superuser` and the launcher issue)."""
    return issue_user_token("root", create_user=True, superuser=True)


@pytest.fixture
def staff_api(staff_token):
    """A client authenticated as a staff user: may post metrics and summaries."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {staff_token}")
    return client


@pytest.fixture
def anon(db):
    return APIClient()


@pytest.fixture
def make_run(db):
    def make(state=Run.FINISHED, **fields):
        fields.setdefault("name", "test run")
        return Run.objects.create(state=state, **fields)

    return make


@pytest.fixture
def run(make_run):
    return make_run(state=Run.STARTED)


def worker_client(run):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    return client
