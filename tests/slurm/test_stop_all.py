"""The Slurm driver's stop_all (the master stops): every job of this master is cancelled,
whatever its run, found by the name the master gives its jobs (no database asked), and
Slurm ends their processes; another master's job is left alone."""

from __future__ import annotations

from dataclasses import replace

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.slurm import SlurmCluster
from tests.slurm.live import job_processes, wait_until


def _sleeping_job(driver: SlurmCluster, run_id: int) -> str:
    run = RunSpec(id=run_id, num_workers=1, num_cpus=1, custom_image_command="sleep 300")
    execution = driver.launch(run, ["sleep", "300"], {})
    job_id = str(execution.record["slurm"]["job_id"])
    wait_until(lambda: job_processes(job_id), 60, f"job {job_id} did not start")
    return job_id


def test_stop_all_cancels_every_job_of_this_master(driver, slurm_cluster, tmp_path):
    ours = _sleeping_job(driver, 7)
    other = SlurmCluster(replace(driver.config, directory=str(tmp_path / "other")))  # its tag
    theirs = _sleeping_job(other, 8)
    try:
        assert driver.stop_all() == ["7"]
        assert job_processes(ours) == []
        assert [str(j["job_id"]) for j in slurm_cluster.active_jobs()] == [theirs]
    finally:
        slurm_cluster.cancel_all()
