"""The Slurm driver without a master: a request Slurm can never grant, what its states and
pending reasons mean, the srun launcher's command and output, and the nodes as pods."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_master.cluster.mpirun import (
    mca_environment,
    mpirun_argv,
    parse_labelled_line,
    srun_argv,
)
from mlbench_master.cluster.slurm import SlurmCluster, states
from mlbench_master.cluster.slurm.commands import JobInfo, NodeInfo
from mlbench_master.cluster.slurm.nodes import phase


def test_a_job_slurm_can_never_start_fails_with_its_reason(driver, slurm_cluster):
    """More CPUs per task than any node has (the API refuses it first; here it is sent):
    Slurm keeps it PENDING (PartitionConfig) forever, so the launch ends with that reason
    and its job is cancelled."""
    run = RunSpec(id=7, num_workers=2, num_cpus=4, custom_image_command="true")
    execution = driver.launch(run, ["true"], {})
    for _ in range(100):
        execution.read(0.1)
        if execution.poll() is not None:
            break
    assert execution.poll() == 1 and not execution.exit_known
    assert "Slurm can never start job" in execution.end_reason()
    assert "(PartitionConfig)" in execution.end_reason()
    execution.kill()
    assert not slurm_cluster.active_jobs()


def test_partition_and_size_checks(driver):
    driver.check_workers(2)
    with pytest.raises(ClusterError, match="partition debug has 2 nodes"):
        driver.check_workers(3)
    with pytest.raises(ClusterError, match="have at most 2 CPUs"):
        driver.check_cpus(3)
    # A partition Slurm lacks is the master's setting, not the request's fault: the API's
    # checks pass it, the master says it, and the run's job fails with it.
    wrong = SlurmCluster(replace(driver.config, partition="nosuch"))
    wrong.check_workers(1)
    wrong.check_cpus(1)
    assert "no such partition; it has debug" in " ".join(wrong.problems())
    with pytest.raises(ClusterError, match="no such partition; it has debug"):
        wrong.prepare(RunSpec(id=8, num_workers=1, num_cpus=1))
    assert driver.problems() == []
    assert (
        SlurmCluster(replace(driver.config, bin_dir="/nonexistent"))
        .problems()[0]
        .startswith("Slurm's tools are not installed here")
    )
    pods = driver.pods()
    assert [p.name for p in pods] == ["n1", "n2"] and {p.phase for p in pods} == {"Idle"}


def test_states_say_what_slurm_decided():
    job = JobInfo("12", "x", "TIMEOUT", "TimeLimit", 15, 2, ("n1", "n2"))
    assert "time limit of 2 min (TIMEOUT)" in states.ended(job)
    assert "lost a node (n1, n2)" in states.ended(replace(job, state="NODE_FAIL"))
    assert "OUT_OF_MEMORY" in states.ended(replace(job, state="OUT_OF_MEMORY"))
    assert states.ended(replace(job, state="COMPLETED")) is None
    assert states.exit_status(3 << 8) == 3 and states.exit_status(9) == 137
    pending = replace(job, state="PENDING", reason="Priority")
    assert "higher priority" in states.pending(pending) and not states.never_starts(pending)
    assert "more nodes" in states.never_starts(replace(pending, reason="PartitionNodeLimit"))


def test_srun_launcher_command_and_its_labelled_output():
    run = RunSpec(id=3, num_workers=2, task="resnet20-cifar10")
    argv = srun_argv(run, python="/opt/py/bin/python", cpus_per_task=2)
    assert argv[:4] == ["srun", "--mpi=pmix", "--label", "--ntasks=2"]
    assert "--cpus-per-task=2" in argv and "--kill-on-bad-exit=1" in argv
    assert argv[argv.index("/opt/py/bin/python") :][:3] == [
        "/opt/py/bin/python", "-m", "mlbench_worker",
    ]  # fmt: skip
    # mpirun's MCA options become the variables srun's ranks read; its other options go.
    options = ("--leave-session-attached", "--mca", "btl", "self,tcp", "-x", "FOO")
    assert srun_argv(run, mpi="pmi2", mpirun_options=options)[:3] == [
        "env", "OMPI_MCA_btl=self,tcp", "srun",
    ]  # fmt: skip
    assert mca_environment(("--mca", "btl")) == {}  # an incomplete option says nothing
    # {rank}: srun's SLURM_PROCID (Open MPI sets no OMPI_COMM_WORLD_RANK under srun).
    custom = replace(run, custom_image_command="tool --rank {rank}", run_all_nodes=True)
    assert srun_argv(custom)[-3:] == ["sh", "-c", 'tool --rank "$SLURM_PROCID"']
    assert mpirun_argv(custom)[-1] == 'tool --rank "$OMPI_COMM_WORLD_RANK"'
    line = parse_labelled_line("1: epoch 3 done\n", "stderr")
    assert (line.rank, line.stream, line.text) == (1, "stderr", "epoch 3 done")
    assert parse_labelled_line("srun: error: n2: task 1").rank is None


def test_node_phases():
    node = NodeInfo("n1", "idle", 2, 0, 100, 50, 0.1, "gpu:a100:4(S:0-1)", "10.0.0.1", "h")
    assert phase(node) == "Idle" and node.gpus == 4
    assert phase(replace(node, state="mixed")) == "Running"
    assert phase(replace(node, state="idle+drain")) == "Drained"
    assert phase(replace(node, state="down")) == "Down"
