"""The Slurm driver's srun launcher (MLBENCH_SLURM_LAUNCHER=srun) on the real local Slurm:
ranks started by `srun --mpi=pmix` on nodes n1 and n2 form one MPI world (mpi4py sees its
size and rank), `{rank}` is each rank's own number, Open MPI's transport given as mpirun
options reaches the ranks, a failing rank ends the step; and a task 2 run through the
whole stack with this launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mlbench_master.cluster.base import OutputLine, RunSpec
from mlbench_master.cluster.failures import SAME_MOMENT, OutputTail, by_signal
from mlbench_master.cluster.mpirun import RANK_ENDS_DIR
from mlbench_master.cluster.slurm import SlurmCluster
from mlbench_master.cluster.slurm.config import SlurmConfig
from tests.slurm.live import slurm_env, start_slurm_master, wait_until

pytestmark = [pytest.mark.mpi]

# Only what the job needs besides the transport: the transport comes as mpirun options,
# which the srun launcher must turn into OMPI_MCA_* variables itself.
BARE_SETUP = (
    "export OMPI_MCA_oob_tcp_if_include=lo OMPI_ALLOW_RUN_AS_ROOT=1 "
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
)
TRANSPORT = ("--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo")

RANK_SCRIPT = """\
import os, sys, time
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
total = world.allreduce(rank + 1)
node = os.environ.get("SLURMD_NODENAME")
btl = os.environ.get("OMPI_MCA_btl")
print(f"rank={rank} size={size} arg={sys.argv[1]} node={node} sum={total} btl={btl}", flush=True)
if rank == int(sys.argv[2]):
    print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
    time.sleep(1)  # srun drops output that arrives after a task's exit (see the report)
    os._exit(3)
world.Barrier()  # a rank that outlives a failed one waits here until srun kills it
"""


def _probe_pmix(conf: str) -> None:
    """srun's pmix plugin loads libpmix (Debian: libpmix-dev, `make test-deps`); skip with
    the reason on a developer machine without it, fail under CI."""
    done = subprocess.run(
        ["srun", "--mpi=pmix", "-N1", "-n1", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLURM_CONF": conf},
        check=False,
    )
    if done.returncode != 0:
        message = f"srun --mpi=pmix does not work here ({done.stderr.strip()}): make test-deps"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " (under CI the Slurm tests must run)")
        pytest.skip(message)


@pytest.fixture
def srun_driver(slurm_cluster, tmp_path) -> SlurmCluster:
    _probe_pmix(slurm_cluster.conf)
    config = SlurmConfig(
        python=sys.executable, mpirun="mpirun", setup=BARE_SETUP, launcher="srun",
        mpirun_options=("--leave-session-attached", *TRANSPORT),
        directory=str(tmp_path / "slurm"), slurm_conf=slurm_cluster.conf,
    )  # fmt: skip
    assert config.srun_mpi == "pmix", "the default plugin is the one Open MPI 5 speaks"
    return SlurmCluster(config)


def _run_to_end(driver: SlurmCluster, run: RunSpec) -> tuple[int, list[OutputLine], dict, str]:
    """The launch's exit code, its output lines, its record and the ends its ranks'
    watchers recorded in the job's folder (what the run job reads before it gives a reason:
    srun drops output that arrives after a task's exit, an end line among it)."""
    execution = driver.launch(run, ["never-used"], {"PYTHONUNBUFFERED": "1"})
    lines: list[OutputLine] = []
    deadline = time.monotonic() + 90
    while execution.poll() is None:
        assert time.monotonic() < deadline, f"the srun job did not end: {lines}"
        lines += execution.read(0.2)
    lines += execution.read(0)
    return execution.poll(), lines, execution.record["slurm"], execution.recorded_rank_ends()


def test_srun_starts_one_world_of_two_ranks_on_two_nodes(srun_driver, slurm_cluster, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    run = RunSpec(
        id=41, num_workers=2, num_cpus=1, run_all_nodes=True, time_limit=120,
        custom_image_command=f"{sys.executable} {script} {{rank}} -1",
    )  # fmt: skip
    code, lines, record, _ = _run_to_end(srun_driver, run)
    said = {line.rank: line.text for line in lines if line.text.startswith("rank=")}
    assert code == 0, lines
    assert said == {
        0: "rank=0 size=2 arg=0 node=n1 sum=3 btl=self,tcp",
        1: "rank=1 size=2 arg=1 node=n2 sum=3 btl=self,tcp",
    }, lines
    argv = record["argv"]
    assert record["launcher"] == "srun" and "--mpi=pmix" in argv and "--label" in argv
    assert argv[:3] == ["env", "OMPI_MCA_btl=self,tcp", "OMPI_MCA_btl_tcp_if_include=lo"]
    wait_until(lambda: not slurm_cluster.active_jobs(), 30, "the job stays active")

    # One rank fails: srun kills the other (blocked in a barrier) and the step's code says so.
    failing = replace(run, id=42, custom_image_command=f"{sys.executable} {script} {{rank}} 1")
    code, lines, failed_record, recorded_ends = _run_to_end(srun_driver, failing)
    assert code != 0, lines
    said = {(x.rank, x.stream, x.text) for x in lines}
    assert (1, "stderr", "rank 1 fails on purpose") in said, lines
    assert any(x.rank is None and "task 1" in x.text for x in lines), "srun names the task"
    # srun may name rank 0 first (its abort can reach srun before rank 1's exit): the
    # ranks' watcher lines say which ended first.
    tail = OutputTail("srun")
    tail.add(lines)
    tail.add_recorded(recorded_ends)  # as the run job does (jobs._end)
    reason = tail.reason(code)
    if not reason.startswith("rank 1 exited with code 3"):
        # What the product promises (failures.first_failures): ends within SAME_MOMENT of
        # each other and of one kind are ordered by the watchers' clocks, read when each
        # watcher gets the CPU. Seen in CI under load: rank 0, aborting by itself with code
        # 14 as its connection to rank 1 broke, was read 3 ms before rank 1's watcher woke.
        # Then the reason must still name both, rank 0's as an exit code within that moment.
        ends = {end.rank: end for end in tail.ends}
        assert reason.startswith(
            f"rank 0 exited with code {ends[0].code}; then: rank 1 exited with code 3"
        ), (reason, lines)
        assert not by_signal(ends[0].code), (reason, lines)
        assert abs(ends[0].time - ends[1].time) <= SAME_MOMENT, (reason, lines)
    # The watchers also wrote their ends to the job's folder, each with srun's rank number.
    folder = Path(failed_record["dir"]) / RANK_ENDS_DIR
    recorded = [line for f in folder.iterdir() for line in f.read_text().splitlines()]
    assert any(line.startswith("1 mlbench rank end: code=3 ") for line in recorded), recorded
    wait_until(lambda: not slurm_cluster.active_jobs(), 30, "the job stays active")


@pytest.fixture
def srun_master(slurm_cluster, postgres_url, tmp_path_factory):
    _probe_pmix(slurm_cluster.conf)
    env = {**slurm_env(slurm_cluster), "MLBENCH_SLURM_LAUNCHER": "srun"}  # its SETUP too
    live = start_slurm_master(postgres_url, tmp_path_factory.mktemp("srun-home"), env)
    yield live
    live.down()


@pytest.mark.slow
def test_task_2_runs_through_srun(srun_master, slurm_cluster):
    run = srun_master.create_run(
        name="srun-logreg", task="logreg-epsilon", backend="GLOO", time_budget=5
    )
    done = srun_master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=180)
    assert done["state"] == "FINISHED", done["reason"]
    slurm = done["job_metadata"]["slurm"]
    assert slurm["launcher"] == "srun" and "--mpi=pmix" in slurm["argv"]
    assert done["summary"]["num_workers"] == 2
    metrics = srun_master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    assert metrics.get("train_loss") and metrics.get("val_accuracy"), sorted(metrics)
    assert not slurm_cluster.active_jobs()
