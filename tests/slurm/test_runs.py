"""Runs through the whole stack on a real Slurm: HTTP → RQ job → sbatch → mpirun inside the
allocation on nodes n1 and n2 → states, logs, metrics, Slurm's own view of the job.

The happy paths run the real workers (ResNet-20 on a tiny synthetic set, task 2); failure
cases use tests/e2e/scripts/sleeper.py as the open-division command (fast, deterministic).
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.e2e.live import script
from tests.slurm.live import job_of, job_processes, job_that_ended, running_job, wait_until

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
END = ("FINISHED", "FAILED", "CANCELLED")


def test_resnet20_on_two_nodes_finishes_with_metrics_per_rank_output_and_nodes(
    master, slurm_cluster
):
    command = (
        "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --max-epochs 2"
        " --train-images 256 --test-images 128 --threads 1 --log-every 1"
    )
    run = master.create_run(
        name="slurm-happy",
        custom_image_command=command,
        run_all_nodes=True,
        time_limit=300,
        test_examples=128,
    )
    job_id = job_of(master, run["id"])
    done = master.wait_state(run["id"], END, timeout=240)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["exit_code"] == 0 and done["reason"] == ""
    assert done["summary"]["num_workers"] == 2 and done["dataset_used"] == "synthetic"

    metrics = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_accuracy", "images_per_sec", "epoch"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"
    # The reference worker prints from rank 0 only (sleeper's ranks both print: see the
    # time-limit test), attributed to it.
    assert 0 in {c["rank"] for c in master.logs(run["id"])}

    # One job of two nodes, one task each, as Slurm itself saw it.
    ended = job_that_ended(done, job_id)
    job = slurm_cluster.job(ended)
    assert (job["job_state"], job["node_count"]) == ("COMPLETED", 2), (
        job["job_state"],
        master.log_text(run["id"])[-3000:],
    )
    assert {n["nodename"] for n in job["job_resources"]["allocated_nodes"]} == {"n1", "n2"}
    record = done["job_metadata"]
    assert (
        record["max_bandwidth"]["applied"] is False
        and "not shape" in record["max_bandwidth"]["why"]
    )
    assert "not applied" in done["manifest"]["not_applied"]["max_bandwidth"]
    # The nodes the run is priced by: two of the job's partition, one worker each.
    node = {"name": "", "kinds": ["debug", "slurm"], "workers": 1, "capacity": ""}
    assert record["nodes"] == [node, node]

    # What was asked of Slurm, as squeue reports it: the run's 300 s as 5 minutes, one CPU
    # a task (squeue's cpus_per_task is empty in Slurm 22.05: the per-node minimum says it).
    assert job["name"] == record["slurm"]["job_name"] and job["partition"] == "debug"
    assert (job["time_limit"], job["tasks"], job["tasks_per_node"]) == (5, 2, 1)
    assert (job["minimum_cpus_per_node"], job["cpus"]) == (1, 2)

    # Node use is kept as pod metrics (the collector's readings of what slurmd reports).
    for node in ("n1", "n2"):
        use = master.get(f"/api/metrics/{node}/", params={"metric_type": "pod"}).json()
        assert use.get("cpu_cores") and use.get("allocated_cpus"), f"{node}: {sorted(use)}"

    pods = {p["name"]: p for p in master.get("/api/pods/").json()}
    assert set(pods) == {"n1", "n2"}
    labels = pods["n1"]["labels"]
    assert (labels["cluster"], labels["cpus"], labels["partition"]) == ("slurm", "2", "debug")
    assert int(labels["memory_mb"]) > 0 and labels["gpus"] == "0"
    assert not job_processes(ended)


def test_task_2_runs_on_two_nodes_by_its_task_name(master):
    run = master.create_run(
        name="slurm-logreg", task="logreg-epsilon", backend="GLOO", time_budget=20
    )
    # The master cannot import the nodes' PyTorch: the version comes with the summary.
    assert run["manifest"]["framework"] == {
        "name": "pytorch", "version": None, "version_from": "worker summary",
    }  # fmt: skip
    done = master.wait_state(run["id"], END, timeout=180)
    assert done["state"] == "FINISHED", done["reason"]
    reported = done["summary"]["versions"]["torch"]
    assert reported and done["manifest"]["framework"]["version"] == reported
    summary = done["summary"]
    assert (summary["task"], summary["dataset"], summary["num_workers"]) == (
        "logreg-epsilon", "synthetic", 2,
    )  # fmt: skip
    metrics = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_accuracy", "samples_per_sec"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"


def test_delete_mid_run_cancels_the_job_and_leaves_no_process(master, slurm_cluster):
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    job_id, _ranks = running_job(master, run["id"])
    response = master.delete(f"/api/runs/{run['id']}/")
    assert response.status_code == 204, response.text
    # DELETE removes the run once cancelled (docs/api.rst); test_workers_page.py cancels
    # one and keeps it, to see it CANCELLED.
    assert master.get(f"/api/runs/{run['id']}/").status_code == 404
    assert slurm_cluster.job(job_id)["job_state"] == "CANCELLED"
    assert not slurm_cluster.active_jobs(), "Slurm still has a job of the run"
    assert job_processes(job_id) == [], "a process of the run's job is still alive"


def test_a_rank_killed_fails_the_run_within_10_s_with_a_reason(master, slurm_cluster):
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    job_id, ranks = running_job(master, run["id"])
    ranks[1].send_signal(signal.SIGKILL)
    done = master.wait_state(run["id"], END, timeout=10)
    assert done["state"] == "FAILED"
    assert "rank 1 exited with code 137 (killed: out of memory?)" in done["reason"]
    wait_until(lambda: not job_processes(job_id), 15, "processes of the job remain")
    assert not slurm_cluster.active_jobs()


def test_time_limit_fails_the_run_with_a_reason_naming_it(master, slurm_cluster):
    run = master.create_run(
        custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True, time_limit=6
    )
    job_id = job_of(master, run["id"])
    done = master.wait_state(run["id"], END, timeout=60)
    assert done["state"] == "FAILED"
    assert "time limit of 6 s reached" in done["reason"]
    job_id = job_that_ended(done, job_id)
    by_rank = {(c["rank"], c["text"].split(" pid")[0]) for c in master.logs(run["id"])}
    assert {(0, "rank 0 started"), (1, "rank 1 started")} <= by_rank, "per-rank output"
    assert job_processes(job_id) == [] and not slurm_cluster.active_jobs()


def test_more_nodes_or_cpus_than_the_partition_has_is_refused(master):
    too_many = master.post("/api/runs/", {"name": "big", "num_workers": 3, "num_cpus": 1})
    assert too_many.status_code == 400, too_many.text
    assert "num_workers" in too_many.text and "partition debug has 2 nodes" in too_many.text
    # num_cpus: more than any node has is refused the same way, naming the field.
    big = master.post("/api/runs/", {"name": "wide", "num_workers": 2, "num_cpus": 4})
    assert big.status_code == 400, big.text
    assert "num_cpus is 4 but the nodes of Slurm partition debug have at most 2 CPUs" in (
        " ".join(big.json()["errors"]["num_cpus"])
    )


def test_a_waiting_job_shows_slurms_reason_then_runs(master, slurm_cluster):
    """Both nodes busy with another user's job: the run waits, saying why; it runs once the
    nodes are free, and its reason is cleared."""
    blocker = slurm_cluster.tool(
        "sbatch", "--parsable", "-N2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300"
    ).strip()
    try:
        wait_until(lambda: slurm_cluster.job(blocker)["job_state"] == "RUNNING", 20, "blocker")
        run = master.create_run(
            custom_image_command=script("sleeper.py") + " 1", run_all_nodes=True
        )
        wait_until(
            lambda: "waiting for resources" in master.run(run["id"])["reason"],
            20,
            "the run does not show Slurm's pending reason",
        )
        shown = master.run(run["id"])
        assert shown["state"] == "STARTED" and "(Resources)" in shown["reason"]
    finally:
        subprocess.run(
            ["scancel", blocker], env={"SLURM_CONF": slurm_cluster.conf, "PATH": "/usr/bin"}
        )
    done = master.wait_state(run["id"], END, timeout=60)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["reason"] == "", "the pending reason is cleared once the job ran"


@pytest.mark.timeout(900)
def test_a_spark_run_finishes_on_two_nodes_and_leaves_no_jvm(master, slurm_cluster):
    """Spark inside the ranks Slurm starts: the two nodes' ranks bring up the cluster and the
    application (nothing of Spark's in the driver), the run finishes with Spark's version
    from the workers, and the job leaves no process (JVMs included) on the nodes. On 4,000
    of the generated rows and 1,000 test rows (the run's train_examples and test_examples):
    the default set's 400,000 and 100,000, made by the executors, graded by the master, are
    tests/e2e/test_spark.py's first run."""
    import importlib.util
    import os
    import shutil

    if (importlib.util.find_spec("pyspark") is None or shutil.which("java") is None) and not (
        os.environ.get("CI")
    ):
        pytest.skip("pyspark or java is missing: pip install 'mlbench[spark]'")
    run = master.create_run(
        name="slurm-spark", task="logreg-epsilon", implementation="spark", time_budget=8,
        target="light", train_examples=4000, test_examples=1000,
    )  # fmt: skip
    job_id = job_of(master, run["id"])
    done = master.wait_state(run["id"], END, timeout=600)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    summary = done["summary"]
    assert summary["implementation"] == "spark" and summary["num_workers"] == 2
    assert summary["versions"]["spark"].startswith("4.")
    assert done["manifest"]["framework"]["name"] == "spark"
    assert done["manifest"]["framework"]["version"] == summary["versions"]["pyspark"]
    assert not job_processes(job_that_ended(done, job_id))


@pytest.mark.timeout(900)
def test_a_flink_run_finishes_on_two_nodes_graded_and_leaves_nothing(master, slurm_cluster):
    """Flink inside the ranks Slurm starts, in Flink's own Python (MLBENCH_FLINK_PYTHON): the
    two nodes' ranks bring up the JobManager and the TaskManagers and rank 0 runs the job;
    the run reaches the light target on 4,000 generated rows, the master's evaluator grades
    its predictions as reported, the framework's version comes from the workers, and the
    job leaves no process (JVMs and Python workers included) on the nodes."""
    import os

    from tests.worker.helpers import FLINK_PYTHON, have_flink

    if not have_flink() and not os.environ.get("CI"):
        pytest.skip(f"no pyflink in {FLINK_PYTHON} or no java: make test-deps")
    run = master.create_run(
        name="slurm-flink", task="logreg-epsilon", implementation="flink", time_budget=60,
        target="light", train_examples=4000, test_examples=1000,
    )  # fmt: skip
    job_id = job_of(master, run["id"])
    done = master.wait_state(run["id"], END, timeout=600)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    summary = done["summary"]
    assert summary["implementation"] == "flink" and summary["num_workers"] == 2
    assert summary["reached"] and summary["versions"]["flink"].startswith("2.")
    assert done["manifest"]["framework"] == {
        "name": "flink", "version": summary["versions"]["pyflink"],
        "version_from": "worker summary",
    }  # fmt: skip
    graded = done["evaluation"]
    assert graded["status"] == "evaluated" and graded["mismatches"] == [], graded
    assert not job_processes(job_that_ended(done, job_id))
