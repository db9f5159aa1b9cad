"""A run's manifest names the commit of the code that ran it (`git_revision`), so anyone
reading a result or a bundle can check out what produced it.

Moving the manifest's module one folder down once made it look for `.git` in the wrong
place and record "" for every run; the regroup's equivalence run (docs/equivalence.rst)
found it. This holds the field to `git rev-parse HEAD` of the checkout under test.
"""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def test_a_new_runs_manifest_names_the_checkouts_commit(api, redis_settings):
    if not (ROOT / ".git").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{ROOT} is not a git checkout: CI runs from a clone")
        pytest.skip(f"{ROOT} is not a git checkout: no revision to compare")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    response = api.post("/api/runs/", {"name": "revision", "num_workers": 1}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["manifest"]["git_revision"] == head
