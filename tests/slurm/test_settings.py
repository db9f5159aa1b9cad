"""Bad Slurm settings: the master says so when it starts and where the Workers page reads
it (/api/health/?cluster=1), starts all the same, and loses no run: one is refused with the
reason (400) or ends FAILED with it, never left waiting.

One master, restarted with each bad setting in turn: SLURM_CONF that cannot be read, a
partition Slurm does not have, Slurm's tools missing.
"""

from __future__ import annotations

import pytest
import requests

from tests.slurm.live import slurm_env, start_slurm_master

pytestmark = [pytest.mark.slow]
END = ("FINISHED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def bad_master(slurm_cluster, postgres_url, tmp_path_factory):
    env = {**slurm_env(slurm_cluster), "SLURM_CONF": "/nonexistent/slurm.conf"}
    live = start_slurm_master(postgres_url, tmp_path_factory.mktemp("bad-home"), env)
    yield live
    live.down()


def _restart(master, **env) -> str:
    """Restart the master with `env` changed; what `up` printed."""
    master.down()
    master.env.update(env)
    done = master.launcher("up", "--detach", "--port", str(master.port), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    master.token = (master.home / "token").read_text().strip()
    return done.stdout


def _said(master, words: str) -> None:
    health = master.get("/api/health/", params={"cluster": "1"})
    assert health.status_code == 200, "the master serves despite the problem"
    body = health.json()
    assert body["cluster"] == "slurm"
    assert any(words in p for p in body["cluster_problems"]), body
    # The Workers page (signed in with the one-time link) holds the box its script fills
    # from the answer above.
    with requests.Session() as browser:
        browser.get((master.home / "login_link").read_text().strip(), timeout=30)
        page = browser.get(master.url + "/", timeout=30)
    assert page.status_code == 200 and 'id="cluster-problems"' in page.text, page.text[:300]


def _not_lost(master, words: str) -> None:
    response = master.post("/api/runs/", {"name": "bad", "num_workers": 2, "num_cpus": 1})
    if response.status_code == 400:
        assert words in response.text, response.text
        return
    assert response.status_code == 201, response.text
    done = master.wait_state(response.json()["id"], END, timeout=60)
    assert done["state"] == "FAILED" and words in done["reason"], done["reason"]


def test_slurm_conf_unreadable(bad_master, slurm_cluster):
    said = _restart(bad_master)
    assert "cluster problem (slurm): SLURM_CONF=/nonexistent/slurm.conf does not exist" in said
    _said(bad_master, "SLURM_CONF=/nonexistent/slurm.conf does not exist")
    _not_lost(bad_master, "slurm.conf")


def test_no_such_partition(bad_master, slurm_cluster):
    said = _restart(bad_master, SLURM_CONF=slurm_cluster.conf, MLBENCH_SLURM_PARTITION="gpu9")
    assert "MLBENCH_SLURM_PARTITION='gpu9': Slurm has no such partition; it has debug" in said
    _said(bad_master, "no such partition")
    _not_lost(bad_master, "no such partition")


def test_slurm_tools_missing(bad_master, slurm_cluster, tmp_path):
    said = _restart(
        bad_master, MLBENCH_SLURM_PARTITION="", MLBENCH_SLURM_BIN=str(tmp_path / "no-slurm")
    )
    assert "Slurm's tools are not installed here" in said
    _said(bad_master, "not installed")
    _not_lost(bad_master, "not installed")
