"""Slurm's nodes as workers while a run's job holds them: /api/pods/ names the job on each
node, the collector's readings of them carry the run, and the Workers page (Chromium) shows
each node's Slurm fields. The run (the open-division sleeper) is then cancelled from its
page: it is CANCELLED, and Slurm has neither its job nor any of its processes left.
"""

from __future__ import annotations

import pytest

from tests.e2e.live import script
from tests.slurm.live import job_processes, running_job, wait_until, workers_page

pytestmark = [pytest.mark.mpi, pytest.mark.slow, pytest.mark.browser]
NODES = ("n1", "n2")


def _pods(master) -> dict[str, dict]:
    return {p["name"]: p for p in master.get("/api/pods/").json()}


def _readings_of_run(master, node: str, run_id: int) -> list[dict]:
    """The node's allocated-CPU readings taken for the run (their metadata names it)."""
    points = master.get(
        f"/api/metrics/{node}/", params={"metric_type": "pod", "details": "1"}
    ).json()
    return [
        p for p in points.get("allocated_cpus", []) if (p["metadata"] or {}).get("run_id") == run_id
    ]


def test_nodes_show_the_runs_job_then_cancel_from_the_page_ends_it(master, slurm_cluster, chromium):
    # `mlbench up --cluster slurm` alone chose the driver (no MLBENCH_CLUSTER was set).
    assert "MLBENCH_CLUSTER" not in master.env
    health = master.get("/api/health/", params={"cluster": "1"}).json()
    assert (health["cluster"], health["cluster_problems"]) == ("slurm", []), health

    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    job_id, _ranks = running_job(master, run["id"])

    wait_until(
        lambda: all(_pods(master)[n]["labels"]["job"] == job_id for n in NODES),
        30,
        f"/api/pods/ does not name job {job_id} on both nodes",
    )
    wait_until(
        lambda: all(_readings_of_run(master, n, run["id"]) for n in NODES),
        30,
        "no reading of the nodes carries the run",
    )
    for rank, node in enumerate(NODES):
        reading = _readings_of_run(master, node, run["id"])[-1]
        assert reading["value"] >= 1 and reading["metadata"]["rank"] == rank, reading

    pods = _pods(master)
    page = workers_page(chromium, master)
    try:
        from playwright.sync_api import expect

        for node in NODES:
            pod, labels = pods[node], pods[node]["labels"]
            assert pod["phase"] == "Running" and labels["slurm_state"] in ("mixed", "allocated")
            row = page.locator(f"tr[data-worker='{node}']")
            expect(row.locator(".phase")).to_have_text("Running")
            fields = [
                pod["node"], pod["ip"], f"Slurm: {labels['slurm_state']}",
                f"{labels['cpus']} CPUs", f"{labels['memory_mb']} MB", f"job {job_id}",
            ]  # fmt: skip
            expect(row.locator("td.where")).to_have_text(" · ".join(f for f in fields if f))
        expect(page.locator("#workers-status")).to_have_text("2 workers.")
        expect(page.locator("#cluster-problems")).to_be_hidden()
        expect(page.locator("#cluster-name")).to_have_text("slurm")

        page.goto(f"/runs/{run['id']}/")
        page.get_by_role("button", name="Cancel run").click()
        page.get_by_role("button", name="Yes").click()
        expect(page.locator("#run-state")).to_contain_text("cancelled")
    finally:
        page.context.close()
    assert not page.watch.problems, "\n".join(page.watch.problems)

    cancelled = master.run(run["id"])
    assert cancelled["state"] == "CANCELLED", cancelled
    assert "cancelled by" in cancelled["reason"] and "in the dashboard" in cancelled["reason"]
    job = slurm_cluster.job(job_id)
    assert job["job_state"] == "CANCELLED" and not slurm_cluster.active_jobs()
    assert job_processes(job_id) == [], "a process of the run's job is still alive"
