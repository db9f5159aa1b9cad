"""A run's system description: the hardware, software, cluster and network it ran on, in
the field names of MLPerf's system description JSON where one fits, so a reader who knows
MLPerf's result tables finds each thing where they look for it.

It is made from what the run stored: the workers' summary (``hardware``, ``versions``: what
the ranks saw) and the master's manifest and fields (cluster, network, workers and their
limits). What is not known is ``""`` (MLPerf's forms leave a field empty), never guessed;
our own dimensions, which MLPerf has no field for, are under ``mlbench``.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.api.models import Run
from mlbench_worker.shared import result

SUBMITTER = "mlbench"
STATUS = "research"  # MLPerf's word for results that are no product's submission


def describe(run: Run) -> dict[str, Any]:
    summary = run.summary or {}
    hardware = result.read(summary, "hardware") or {}
    versions = dict(result.read(summary, "versions") or {})
    manifest = run.manifest or {}
    device = "gpu" if run.gpu_enabled else "cpu"
    hosts = hardware.get("hosts") or []
    frameworks = {k: v for k, v in versions.items() if k not in ("python", "mpi", "mlbench")}
    memory = hardware.get("memory_gib")
    network = f"{run.max_bandwidth} Mbit/s per worker"
    if run.latency:
        network += f", {run.latency} ms added each way"
    return {
        "submitter": SUBMITTER,
        "division": run.division,
        "status": STATUS,
        "system_name": f"mlbench-{run.num_workers}x{device}",
        "system_type": "research",
        "number_of_nodes": str(len(hosts) or run.num_workers),
        "host_processors_per_node": "",
        "host_processor_model_name": str(hardware.get("cpu_model") or ""),
        "host_processor_core_count": "",
        "host_processor_vcpu_count": str(hardware.get("cpu_count") or ""),
        "host_memory_capacity": f"{memory} GiB" if memory is not None else "",
        "host_networking": network,
        "host_networking_topology": _topology(manifest),
        "accelerators_per_node": str(hardware.get("gpu_count") or 0),
        "accelerator_model_name": str(hardware.get("gpu") or ""),
        "framework": ", ".join(f"{k} {v}" for k, v in frameworks.items()),
        "other_software_stack": ", ".join(
            f"{k} {versions[k]}" for k in ("python", "mpi", "mlbench") if versions.get(k)
        ),
        "operating_system": str(hardware.get("platform") or ""),
        "hw_notes": (
            _workers(run.num_workers, run.num_cpus)
            + (f", {hardware['threads_per_rank']} threads per rank" if hardware.get("threads_per_rank") else "")
        ),  # fmt: skip
        "sw_notes": f"backend {run.backend}" + (f", algorithm {run.algorithm}" if run.algorithm else ""),
        "mlbench": {
            "cluster": (manifest.get("master") or {}).get("cluster", ""),
            "workers": run.num_workers,
            "cpus_per_worker": run.num_cpus,
            "gpu_enabled": run.gpu_enabled,
            "max_bandwidth_mbit_s": run.max_bandwidth,
            "latency_ms": run.latency,
            "backend": run.backend,
            "hosts": hosts,
            "network": manifest.get("network") or {},
            "not_applied": manifest.get("not_applied") or {},
            "device": result.read(summary, "device") or "",
        },
    }  # fmt: skip


def _topology(manifest: dict[str, Any]) -> str:
    cluster = (manifest.get("master") or {}).get("cluster", "")
    return {
        "local": "worker slots on one machine (network namespaces on a bridge where allowed)",
        "kubernetes": "worker pods of one StatefulSet on the cluster's pod network",
        "slurm": "one Slurm job's nodes",
    }.get(cluster, cluster)


def _workers(workers: int, cpus: float) -> str:
    """ "1 worker of 1 CPU core", "4 workers of 2 CPU cores each": MLPerf's hw_notes are
    read by people, so counts of one are said as such."""
    cores = f"{cpus:g} CPU core{'' if cpus == 1 else 's'}"
    if workers == 1:
        return f"1 worker of {cores}"
    return f"{workers} workers of {cores} each"
