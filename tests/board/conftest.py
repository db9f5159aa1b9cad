"""The board tests' stored runs (stored.py), as fixtures."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from tests.board.stored import Stored, prepared


@pytest.fixture
def staff(stored) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('root')}")
    return client


@pytest.fixture
def stored(db, settings, tmp_path) -> Stored:
    return prepared(settings, tmp_path)
