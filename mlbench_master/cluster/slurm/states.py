"""What Slurm's job states and pending reasons mean for a run, in words a person can act on.

Slurm says `PENDING (Resources)` or `TIMEOUT`; the run page should say what that means and
what to do. Kept apart from the code that asks squeue so the wording can be read (and
tested) as a table.
"""

from __future__ import annotations

from mlbench_master.cluster.slurm.commands import JobInfo

# Pending reasons that pass by themselves, with what they mean.
WAITING = {
    "Resources": "waiting for resources: the nodes it needs are busy",
    "Priority": "waiting: jobs of higher priority are ahead of it",
    "None": "waiting to be scheduled",
    "BeginTime": "waiting for its start time",
    "Dependency": "waiting for the jobs it depends on",
    "ReqNodeNotAvail": "waiting: nodes it needs are down, drained or reserved",
    "PartitionDown": "waiting: its partition is down",
    "PartitionInactive": "waiting: its partition is inactive",
    "NodeDown": "waiting: a node it needs is down",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "waiting for its reservation",
    "Licenses": "waiting for licenses",
    "QOSGrpCpuLimit": "waiting: its QoS has no CPUs left",
    "QOSMaxJobsPerUserLimit": "waiting: its QoS runs no more jobs of this user now",
    "AssocGrpCpuLimit": "waiting: its account has no CPUs left",
}

# Pending reasons that never pass: the job is cancelled and the run fails with them.
NEVER = {
    "PartitionNodeLimit": "it asks for more nodes than its partition has or allows",
    "PartitionConfig": "its partition cannot give it what it asks for (CPUs per task, "
    "memory or GPUs beyond any node's)",
    "PartitionTimeLimit": "its time limit is beyond its partition's maximum",
    "BadConstraints": "no node has the features or resources it asks for",
    "InvalidAccount": "its account (MLBENCH_SLURM_ACCOUNT) is not valid",
    "InvalidQOS": "its QoS (MLBENCH_SLURM_QOS) is not valid",
    "AccountNotAllowed": "its account may not use the partition",
    "QOSNotAllowed": "its QoS may not use the partition",
    "DependencyNeverSatisfied": "a job it depends on failed",
}

_SIGNALS = {9: "killed", 15: "terminated", 6: "aborted", 11: "segmentation fault"}


def pending(job: JobInfo) -> str:
    """The run's reason while its job waits."""
    meaning = WAITING.get(job.reason, f"waiting ({job.reason})")
    return f"Slurm job {job.job_id} is {job.state} ({job.reason}): {meaning}"


def never_starts(job: JobInfo) -> str | None:
    """The FAILED reason when `job` waits for something that will never come; else None."""
    why = NEVER.get(job.reason)
    if why is None:
        return None
    return (
        f"Slurm can never start job {job.job_id} ({job.reason}): {why}; ask for fewer workers "
        "or CPUs, or change MLBENCH_SLURM_PARTITION / MLBENCH_SLURM_SBATCH_OPTIONS"
    )


def exit_status(raw: int) -> int:
    """A shell's exit code from Slurm's raw wait status (code << 8, or the signal)."""
    signal = raw & 0x7F
    return 128 + signal if signal else (raw >> 8) & 0xFF


def ended(job: JobInfo) -> str | None:
    """Why `job` ended when Slurm, not mpirun, decided it; None when mpirun's own exit code
    and output say it better (COMPLETED, FAILED) or it has not ended."""
    jid, limit = job.job_id, job.time_limit_min
    limit_text = f"{limit} min" if limit is not None else "its limit"
    nodes = ", ".join(job.nodes) or "a node"
    reasons = {
        "TIMEOUT": f"Slurm stopped job {jid} at its time limit of {limit_text} (TIMEOUT): "
        "raise the run's time_limit or shorten its time budget",
        "NODE_FAIL": f"Slurm job {jid} lost a node ({nodes}) (NODE_FAIL): it failed or stopped "
        "answering slurmctld; start the run again, and tell the cluster's administrators",
        "OUT_OF_MEMORY": f"Slurm job {jid} ran out of memory (OUT_OF_MEMORY): ask for fewer "
        "workers per node or more memory (--mem in MLBENCH_SLURM_SBATCH_OPTIONS)",
        "CANCELLED": f"Slurm job {jid} was cancelled outside mlbench (CANCELLED: scancel by a "
        "user or an administrator)",
        "PREEMPTED": f"Slurm job {jid} was preempted by a job of higher priority (PREEMPTED)",
        "BOOT_FAIL": f"Slurm could not boot the nodes of job {jid} (BOOT_FAIL)",
        "DEADLINE": f"Slurm job {jid} reached its deadline (DEADLINE)",
    }
    return reasons.get(job.state)
