"""A researcher's own algorithm on the local Slurm cluster (issue 44): written here against
mlbench_worker/algorithms/public.py only, uploaded through the API, named by its SHA-256 in
POST /api/runs/, run by the Slurm driver as one job on nodes n1 and n2 (2 ranks, mpirun
inside the allocation). Each rank fetches the file from the master with the run's worker
token, checks its hash and trains task 2 with it to its light target; the bytes the run
reports are the harness's count of what the algorithm's wire carried.

Why on Slurm too: tests/e2e runs the same path on the local driver, where the ranks share
the master's machine and environment; here they run under slurmd, in the job's environment,
so the fetch (master URL and token through sbatch), the import from a private folder and
the counted wire are held to work where a cluster runs them.
"""

from __future__ import annotations

import pytest
import requests

from tests.outside_randk import randk_source
from tests.slurm.live import job_of, job_that_ended

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
END = ("FINISHED", "FAILED", "CANCELLED")
DENSITY = 0.5

# Random-k with error feedback, in the public interface only (tests/outside_randk.py).
SOURCE, SHA = randk_source("randk-slurm")


def test_an_uploaded_algorithm_trains_task_2_on_two_slurm_nodes_counted_by_the_harness(
    master, slurm_cluster
):
    stored = requests.post(
        master.url + "/api/algorithms/",
        data=SOURCE,
        headers={**master.headers, "Content-Type": "text/x-python"},
        timeout=30,
    )
    assert stored.status_code in (200, 201), stored.text
    assert (stored.json()["sha256"], stored.json()["name"]) == (SHA, "randk-slurm")
    run = master.create_run(
        name="slurm-outside", task="logreg-epsilon", dataset="synthetic", target="light",
        backend="GLOO", algorithm_source=SHA, algorithm_options={"density": DENSITY},
        max_epochs=8, time_limit=300,
    )  # fmt: skip
    job_id = job_of(master, run["id"])
    done = master.wait_state(run["id"], END, timeout=300)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    summary = done["summary"]
    assert summary["reached"] and summary["num_workers"] == 2, summary
    # Slurm ran it as one job on both nodes.
    ended = job_that_ended(done, job_id)
    job = slurm_cluster.job(ended)
    assert (job["job_state"], job["node_count"]) == ("COMPLETED", 2), (
        job["job_state"],
        master.log_text(run["id"])[-3000:],
    )

    # The run and its summary name the same code: the file's NAME, options, hash.
    assert (done["algorithm"], done["algorithm_source"]) == ("randk-slurm", SHA)
    assert done["algorithm_options"] == {"density": DENSITY}
    for field in ("algorithm", "algorithm_options", "algorithm_source"):
        assert summary[field] == done[field], field
    assert done["division"] == "open" and done["manifest"]["algorithm"]["sha256"] == SHA

    # The bytes are the harness's count of the wire: k fp32 values per step, k drawn from
    # the model's size (an fp32 all-reduce of every gradient: full_allreduce_bytes / 4).
    numel = round(summary["compression_ratio"] * summary["comm_bytes_per_step"]) // 4
    k = max(1, int(DENSITY * numel))
    assert summary["comm_bytes_per_step"] == 4 * k
    series = master.get(
        f"/api/metrics/{run['id']}/", params={"metric_type": "run", "metric_filter": "comm_bytes"}
    ).json()
    assert series.get("comm_bytes"), series
    assert {p["value"] for p in series["comm_bytes"]} == {4 * k}
    assert (
        not master.get(
            f"/api/metrics/{run['id']}/",
            params={"metric_type": "run", "metric_filter": "claimed_comm_bytes"},
        )
        .json()
        .get("claimed_comm_bytes")
    )  # it claims nothing: only the count is reported
