"""Bad Slurm settings: the master says so when it starts and on the Workers page (Chromium,
from /api/health/?cluster=1), starts all the same, and loses no run: one is refused with the
reason (400) or ends FAILED with it, never left waiting.

One master (started, like every master here, by `mlbench up --cluster slurm` with no
MLBENCH_CLUSTER set), restarted with each bad setting in turn: SLURM_CONF that cannot be
read, a partition Slurm does not have, Slurm's tools missing, and sbatch options no node
can satisfy (Slurm takes the job, which can never start).
"""

from __future__ import annotations

import pytest

from tests.e2e.live import script
from tests.slurm.live import job_of, slurm_env, start_slurm_master, workers_page

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
    assert "MLBENCH_CLUSTER" not in master.env, "the --cluster flag alone picks the driver"
    return master.up()


def _said(master, browser, words: str) -> None:
    health = master.get("/api/health/", params={"cluster": "1"})
    assert health.status_code == 200, "the master serves despite the problem"
    body = health.json()
    assert body["cluster"] == "slurm"
    assert any(words in p for p in body["cluster_problems"]), body
    # The Workers page shows the problem, as the master said it.
    from playwright.sync_api import expect

    page = workers_page(browser, master)
    try:
        box = page.locator("#cluster-problems")
        expect(box).to_be_visible()
        expect(box.locator("#cluster-name")).to_have_text("slurm")
        expect(box.locator("li")).to_have_text(body["cluster_problems"])
        assert words in box.inner_text()
    finally:
        page.context.close()
    assert not page.watch.problems, "\n".join(page.watch.problems)


def _not_lost(master, words: str, refused: bool | None = None) -> None:
    """A run asked for is refused with `words`, or stored and FAILED with them (`refused`
    says which must happen; None: either)."""
    response = master.post("/api/runs/", {"name": "bad", "num_workers": 2, "num_cpus": 1})
    if refused is not None:
        assert (response.status_code == 400) is refused, response.text
    if response.status_code == 400:
        assert words in response.text, response.text
        return
    assert response.status_code == 201, response.text
    done = master.wait_state(response.json()["id"], END, timeout=60)
    assert done["state"] == "FAILED" and words in done["reason"], done["reason"]


@pytest.mark.browser
def test_slurm_conf_unreadable(bad_master, slurm_cluster, chromium):
    said = _restart(bad_master)
    assert "cluster problem (slurm): SLURM_CONF=/nonexistent/slurm.conf does not exist" in said
    _said(bad_master, chromium, "SLURM_CONF=/nonexistent/slurm.conf does not exist")
    _not_lost(bad_master, "slurm.conf")


@pytest.mark.browser
def test_no_such_partition(bad_master, slurm_cluster, chromium):
    said = _restart(bad_master, SLURM_CONF=slurm_cluster.conf, MLBENCH_SLURM_PARTITION="gpu9")
    assert "MLBENCH_SLURM_PARTITION='gpu9': Slurm has no such partition; it has debug" in said
    _said(bad_master, chromium, "no such partition")
    # The master's setting, not the request's fields: stored, and FAILED by its job.
    _not_lost(bad_master, "no such partition", refused=False)


@pytest.mark.browser
def test_slurm_tools_missing(bad_master, slurm_cluster, tmp_path, chromium):
    said = _restart(
        bad_master, MLBENCH_SLURM_PARTITION="", MLBENCH_SLURM_BIN=str(tmp_path / "no-slurm")
    )
    assert "Slurm's tools are not installed here" in said
    _said(bad_master, chromium, "not installed")
    _not_lost(bad_master, "not installed")


def test_a_job_slurm_can_never_start_fails_the_run_with_slurms_reason(bad_master, slurm_cluster):
    """The site's sbatch options reach Slurm (after the driver's own, so they win) and ask
    for 4 CPUs a task where nodes have 2: Slurm takes the job and keeps it PENDING
    (PartitionConfig) for ever; the run fails with that reason and its job is cancelled."""
    _restart(
        bad_master, SLURM_CONF=slurm_cluster.conf, MLBENCH_SLURM_PARTITION="",
        MLBENCH_SLURM_BIN="", MLBENCH_SLURM_SBATCH_OPTIONS="--mem=64 --cpus-per-task=4",
    )  # fmt: skip
    health = bad_master.get("/api/health/", params={"cluster": "1"}).json()
    assert health["cluster_problems"] == [], "these settings are not a problem by themselves"
    run = bad_master.create_run(
        custom_image_command=script("sleeper.py") + " 1", run_all_nodes=True
    )
    job_id = job_of(bad_master, run["id"])
    done = bad_master.wait_state(run["id"], END, timeout=60)
    assert done["state"] == "FAILED", done
    assert f"Slurm can never start job {job_id} (PartitionConfig)" in done["reason"], done
    job = slurm_cluster.job(job_id)
    assert (job["memory_per_node"], job["minimum_cpus_per_node"]) == (64, 4), job
    assert job["job_state"] == "CANCELLED" and not slurm_cluster.active_jobs()
