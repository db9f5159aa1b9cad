"""The master killed (SIGKILL) while a run's Slurm job goes on, then started again: it
re-attaches to the job still running, or settles the one that ended meanwhile, and reads
the output it missed from the offsets it had stored: no metric point and no output line is
lost or stored twice (checked against rank 0's own record, as tests/e2e/test_faults does).
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.live import script
from tests.e2e.test_faults import _assert_log_stored_once, _assert_stored_exactly_once, _stored
from tests.slurm.live import (
    job_of,
    job_processes,
    kill_master,
    rank_processes,
    running_job,
    wait_until,
)

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
END = ("FINISHED", "FAILED", "CANCELLED")
COMMAND = (
    "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --train-images 256"
    " --test-images 128 --max-epochs 1000 --time-budget 24 --target paper --threads 1"
    " --log-every 1 --metrics-file {points}"
)


def test_master_killed_mid_run_and_restarted_loses_no_point_and_no_line(
    master, slurm_cluster, tmp_path
):
    points = tmp_path / "points.jsonl"
    run = master.create_run(
        name="restart", custom_image_command=COMMAND.format(points=points),
        run_all_nodes=True, time_limit=300, test_examples=128,
    )  # fmt: skip
    wait_until(lambda: _stored(master, run["id"]) > 0, 120, "no metric point stored")
    job_id = job_of(master, run["id"])  # now: the job whose ranks post (job_that_ended)
    kill_master(master)
    assert rank_processes(job_id, timeout=5), "the ranks live on without the master"
    time.sleep(3)  # the ranks write and post while no master listens
    master.up()
    # The job outlived the master (its time budget leaves room for the restart), so the
    # new master re-attaches to a RUNNING job rather than settling an ended one.
    job = slurm_cluster.job(job_id)
    assert job["job_state"] == "RUNNING", f"job {job_id} ended before the master was back: {job}"
    done = master.wait_state(run["id"], END, timeout=180)
    assert done["state"] == "FINISHED", f"{done['reason']}\n{master.log_text(run['id'])[-2000:]}"
    _assert_stored_exactly_once(master, run, points)
    _assert_log_stored_once(master, run["id"])
    assert not job_processes(job_id)


def test_a_job_that_ended_while_the_master_was_down_is_settled(master, slurm_cluster):
    run = master.create_run(custom_image_command=script("sleeper.py") + " 3", run_all_nodes=True)
    running_job(master, run["id"])
    kill_master(master)
    wait_until(lambda: not slurm_cluster.active_jobs(), 60, "the job did not end")
    master.up()
    done = master.wait_state(run["id"], END, timeout=60)
    assert done["state"] == "FINISHED", done["reason"]
    text = master.log_text(run["id"])
    assert "rank 0 done" in text and "rank 1 done" in text, "the output it missed is stored"
    assert text.count("rank 0 started") == 1, "no line is stored twice"
