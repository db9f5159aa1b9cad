"""The one place that runs Slurm's tools (sbatch, squeue, sinfo, scancel) and reads them.

Only machine-readable output is parsed: `squeue --json` and `sinfo --json` (Slurm 22.05's
JSON, which has no filters: every job or node is listed and filtered here), `sbatch
--parsable` (the job id) and `sinfo --noheader --format` (the default partition, which the
JSON does not name). Every tool runs with the configured SLURM_CONF, so the master can
drive any cluster, and every failure is a ClusterError that says what to fix.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.slurm.config import SlurmConfig

TIMEOUT = 30.0  # seconds one call of a tool may take (slurmctld answers in milliseconds)
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING"}


class SlurmUnavailable(ClusterError):
    """A Slurm tool is missing or its controller cannot be reached (message says which)."""


@dataclass(frozen=True)
class JobInfo:
    """A job as squeue reports it. `exit_code` is the raw wait status (code << 8 | signal)."""

    job_id: str
    name: str
    state: str
    reason: str
    exit_code: int
    time_limit_min: int | None
    nodes: tuple[str, ...] = ()
    partition: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING")


@dataclass(frozen=True)
class NodeInfo:
    """A node as sinfo reports it."""

    name: str
    state: str
    cpus: int
    alloc_cpus: int
    memory_mb: int
    free_memory_mb: int | None
    cpu_load: float | None  # load average (sinfo reports it times 100)
    gres: str
    address: str
    hostname: str
    partitions: tuple[str, ...] = field(default=())
    reason: str = ""

    @property
    def gpus(self) -> int:
        """GPUs among the node's generic resources (`gpu:2`, `gpu:a100:4(S:0-1)`)."""
        total = 0
        for item in filter(None, self.gres.split(",")):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and parts[-1].isdigit():
                total += int(parts[-1])
        return total


def check_conf(config: SlurmConfig) -> None:
    """SlurmUnavailable when the configured SLURM_CONF cannot be read: Slurm's tools would
    then look for a configuration server in DNS and hang for half a minute before failing."""
    conf = config.slurm_conf
    if conf and not os.access(conf, os.R_OK):
        why = "does not exist" if not os.path.exists(conf) else "cannot be read"
        raise SlurmUnavailable(
            f"SLURM_CONF={conf} {why}: point SLURM_CONF at the cluster's slurm.conf"
        )


def run_tool(config: SlurmConfig, tool: str, *args: str, timeout: float = TIMEOUT) -> str:
    """Run Slurm's `tool` with `args`; its stdout, or ClusterError with its stderr."""
    check_conf(config)
    program = config.program(tool)
    try:
        done = subprocess.run(
            [program, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=config.environment(),
            check=False,
        )
    except FileNotFoundError as exc:
        raise SlurmUnavailable(
            f"Slurm's tools are not installed here: {program} not found (install Slurm's "
            "client tools on the master's host, or set MLBENCH_SLURM_BIN to their folder)"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmUnavailable(f"{tool} did not answer within {timeout:g} s") from exc
    except OSError as exc:
        raise SlurmUnavailable(f"{program} cannot be run: {exc}") from exc
    if done.returncode != 0:
        text = " ".join((done.stderr or done.stdout).split())[:600]
        conf = config.environment().get("SLURM_CONF", "Slurm's default slurm.conf")
        raise SlurmUnavailable(f"{tool} failed (SLURM_CONF {conf}): {text or done.returncode}")
    return done.stdout


def _json(config: SlurmConfig, tool: str, *args: str) -> dict[str, Any]:
    text = run_tool(config, tool, "--json", *args)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmUnavailable(f"{tool} --json did not print JSON: {text[:200]!r}") from exc
    errors = [e for e in data.get("errors") or [] if e]
    if errors:
        raise SlurmUnavailable(f"{tool} --json reported errors: {errors}")
    return data


def submit(config: SlurmConfig, script: str, options: list[str], env: dict[str, str]) -> str:
    """sbatch `script` with `options`; the job id. `env` is the job's environment (sbatch
    passes its own environment to the job), so no secret is written into the script."""
    check_conf(config)
    program = config.program("sbatch")
    full_env = {**config.environment(), **env}
    try:
        done = subprocess.run(
            [program, "--parsable", *options, script],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=full_env,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SlurmUnavailable(
            f"Slurm's tools are not installed here: {program} not found"
        ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"sbatch could not submit the job: {exc}") from exc
    if done.returncode != 0:
        text = " ".join(done.stderr.split())[:800]
        raise ClusterError(f"Slurm refused the job: {text or f'sbatch exit {done.returncode}'}")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise ClusterError(f"sbatch printed no job id: {done.stdout.strip()[:200]!r}")
    return job_id


def _job(raw: dict[str, Any]) -> JobInfo:
    resources = raw.get("job_resources") or {}
    nodes = tuple(
        n.get("nodename", "") for n in resources.get("allocated_nodes") or [] if n.get("nodename")
    )
    limit = raw.get("time_limit")
    return JobInfo(
        job_id=str(raw.get("job_id")),
        name=str(raw.get("name") or ""),
        state=str(raw.get("job_state") or "UNKNOWN"),
        reason=str(raw.get("state_reason") or ""),
        exit_code=int(raw.get("exit_code") or 0),
        time_limit_min=int(limit) if isinstance(limit, int) else None,
        nodes=nodes,
        partition=str(raw.get("partition") or ""),
    )


def jobs(config: SlurmConfig) -> list[JobInfo]:
    """Every job slurmctld still knows (ended ones until MinJobAge has passed)."""
    data = _json(config, "squeue", "--states=all")
    return [_job(raw) for raw in data.get("jobs") or []]


def job(config: SlurmConfig, job_id: str) -> JobInfo | None:
    """Job `job_id`, or None when slurmctld no longer knows it."""
    return next((j for j in jobs(config) if j.job_id == str(job_id)), None)


def cancel(config: SlurmConfig, job_ids: list[str]) -> None:
    """scancel the jobs (their every step and process); a job already gone is no error."""
    if job_ids:
        try:
            run_tool(config, "scancel", "--quiet", *job_ids)
        except SlurmUnavailable as exc:
            if "Invalid job id" not in str(exc):
                raise


def _node(raw: dict[str, Any]) -> NodeInfo:
    free = raw.get("free_memory")
    load = raw.get("cpu_load")
    flags = [str(f).lower() for f in raw.get("state_flags") or []]
    state = str(raw.get("state") or "unknown").lower()
    return NodeInfo(
        name=str(raw.get("name")),
        state="+".join([state, *flags]),
        cpus=int(raw.get("cpus") or 0),
        alloc_cpus=int(raw.get("alloc_cpus") or 0),
        memory_mb=int(raw.get("real_memory") or 0),
        free_memory_mb=int(free) if isinstance(free, int) else None,
        cpu_load=load / 100.0 if isinstance(load, int | float) else None,
        gres=str(raw.get("gres") or ""),
        address=str(raw.get("address") or ""),
        hostname=str(raw.get("hostname") or ""),
        partitions=tuple(raw.get("partitions") or ()),
        reason=str(raw.get("reason") or ""),
    )


def nodes(config: SlurmConfig) -> list[NodeInfo]:
    """Every node of the cluster."""
    return [_node(raw) for raw in _json(config, "sinfo").get("nodes") or []]


def partitions(config: SlurmConfig) -> dict[str, str]:
    """Partition name -> availability ("up", "down", ...); the default one is under "*"
    too (sinfo marks it with a trailing `*`)."""
    text = run_tool(config, "sinfo", "--noheader", "--format=%P|%a")
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, _, avail = line.strip().partition("|")
        if not name:
            continue
        if name.endswith("*"):
            name = name[:-1]
            found["*"] = name
        found[name] = avail
    return found
