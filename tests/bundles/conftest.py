"""Two installations in one test database: each has its own MLBENCH_HOME, so its own
signing key (what names an installation). `origin` exports, `here` imports; the rows of
both live in the one PostgreSQL test database, which the import must not confuse: the
imported runs are new rows with their origin."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.grading import scoring


class Installations:
    def __init__(self, settings, tmp_path) -> None:
        self.settings = settings
        self.homes = {name: tmp_path / name for name in ("origin", "here", "third")}
        for home in self.homes.values():
            home.mkdir()
        self.use("origin")

    def use(self, name: str):
        self.settings.MLBENCH_HOME = self.homes[name]
        return self.homes[name]


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    scoring.forget_evaluators()


@pytest.fixture
def installations(settings, tmp_path) -> Installations:
    return Installations(settings, tmp_path)


@pytest.fixture
def staff(db) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Token {issue_user_token('root', create_user=True, superuser=True)}"
    )
    return client


@pytest.fixture
def user(db) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('alice', create_user=True)}")
    return client
