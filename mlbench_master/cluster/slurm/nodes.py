"""Slurm's nodes as the API's pods, and their use as pod metrics.

A node is a worker here: /api/pods/ lists every node of the run's partition with its
state, CPUs, memory, GPUs and the job on it (in `labels`, the pod object's free-form part,
so the API's shape stays the seeds'). Readings come from what slurmd reports to slurmctld
(sinfo --json: load average and free memory), so the master needs no access to the nodes.
"""

from __future__ import annotations

import datetime as dt

from mlbench_master.cluster.base import PodInfo, PodSample, RunSpec
from mlbench_master.cluster.slurm.commands import JobInfo, NodeInfo

PHASES = {"idle": "Idle", "allocated": "Running", "mixed": "Running", "completing": "Running"}


def phase(node: NodeInfo) -> str:
    """The pod phase of a node: Idle, Running, or its Slurm state (Down, Drained ...)."""
    base, *flags = node.state.split("+")
    if "drain" in flags or base in ("drained", "draining"):
        return "Drained"
    if base in ("down", "fail", "future", "unknown") or "not_responding" in flags:
        return base.capitalize() if base != "fail" else "Down"
    return PHASES.get(base, base.capitalize())


def jobs_on_nodes(jobs: list[JobInfo]) -> dict[str, str]:
    """Node name -> the running job on it (the first, when several share a node)."""
    found: dict[str, str] = {}
    for job in jobs:
        if job.state in ("RUNNING", "COMPLETING"):
            for name in job.nodes:
                found.setdefault(name, job.job_id)
    return found


def pods(nodes: list[NodeInfo], jobs: list[JobInfo], partition: str) -> list[PodInfo]:
    """The nodes of `partition` (every node when it is empty) as pods."""
    on = jobs_on_nodes(jobs)
    found = []
    for node in nodes:
        if partition and partition not in node.partitions:
            continue
        labels = {
            "app": "mlbench",
            "component": "worker",
            "cluster": "slurm",
            "partition": ",".join(node.partitions),
            "slurm_state": node.state,
            "cpus": str(node.cpus),
            "memory_mb": str(node.memory_mb),
            "gpus": str(node.gpus),
            "job": on.get(node.name, ""),
        }
        if node.reason:
            labels["slurm_reason"] = node.reason
        found.append(
            PodInfo(
                name=node.name,
                labels=labels,
                phase=phase(node),
                ip=node.address,
                node=node.hostname,
            )
        )
    return found


def samples(
    nodes: list[NodeInfo], jobs: list[JobInfo], active: RunSpec | None, job_id: str
) -> list[PodSample]:
    """One reading of every node that slurmd reports on; the nodes of the active run's job
    (`job_id`) carry its run id and their rank (mpirun maps rank i to the i-th node)."""
    now = dt.datetime.now(dt.UTC)
    ranks: dict[str, int] = {}
    for job in jobs:
        if active is not None and job.job_id == job_id:
            ranks = {name: i for i, name in enumerate(job.nodes)}
    found = []
    for node in nodes:
        meta: dict[str, object] = {"slurm_state": node.state}
        if active is not None and node.name in ranks:
            meta.update(run_id=active.id, rank=ranks[node.name])
        if node.cpu_load is not None:
            found.append(PodSample(node.name, "cpu_cores", node.cpu_load, now, False, dict(meta)))
        # Free memory is the host's: a node configured with less than it (several slurmd on
        # one host) says nothing of its own use, so no reading is made of it.
        if node.free_memory_mb is not None and 0 < node.free_memory_mb <= node.memory_mb:
            used = (node.memory_mb - node.free_memory_mb) * 1024 * 1024
            found.append(PodSample(node.name, "memory_bytes", float(used), now, False, dict(meta)))
        found.append(
            PodSample(node.name, "allocated_cpus", float(node.alloc_cpus), now, False, dict(meta))
        )
    return found
