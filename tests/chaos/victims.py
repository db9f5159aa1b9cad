"""What a fault can hit, found the way an operator would find it: a run's ranks and its
mpirun by the markers in their environment, its slots' links by their names, the master's
services by the pids in its state file.

Two drivers: the local one (ranks carry MLBENCH_LOCAL_CLUSTER and MLBENCH_RUN_ID; slots are
network namespaces on a bridge) and Slurm (ranks carry the job's SLURM_JOB_ID; no links of
the master's own). `leftovers` says what of the master still exists after `mlbench down`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mlbench_master.cluster.local.network import NETNS_ETC, home_tag
from mlbench_master.cluster.local.processes import (
    CLUSTER_MARK,
    RANK_VAR,
    RUN_MARK,
    environ_of,
    is_alive,
)
from tests.e2e.live import LiveMaster

LAUNCHERS = {"mpirun", "prterun", "mpiexec", "orterun"}


def alive(proc: psutil.Process) -> bool:
    return is_alive(proc)


@dataclass
class Victims:
    """The local driver's view: processes by marker, links by name."""

    master: LiveMaster
    slurm: Any = None  # tests.slurm.live.SlurmCluster for the Slurm driver

    @property
    def home(self) -> Path:
        return self.master.home

    # -- a run's processes
    def run_processes(self, run_id: int) -> list[psutil.Process]:
        """Every live process of the run's launch (ranks, mpirun, its daemons)."""
        if self.slurm is not None:
            job = self.slurm_job(run_id)
            return [p for p in _with_env("SLURM_JOB_ID", job)] if job else []
        return [
            p
            for p in _with_env(CLUSTER_MARK, str(self.home))
            if _env(p).get(RUN_MARK) == str(run_id)
        ]

    def ranks(self, run_id: int) -> dict[int, psutil.Process]:
        """The run's rank processes (the worker's Python) by MPI rank."""
        found: dict[int, psutil.Process] = {}
        for proc in self.run_processes(run_id):
            env = _env(proc)
            with contextlib.suppress(psutil.Error, ValueError):
                if RANK_VAR in env and "python" in proc.name():
                    found[int(env[RANK_VAR])] = proc
        return found

    def launcher(self, run_id: int) -> psutil.Process | None:
        """The run's mpirun (Open MPI 5 calls itself prterun)."""
        for proc in self.run_processes(run_id):
            with contextlib.suppress(psutil.Error):
                if proc.name() in LAUNCHERS:
                    return proc
        return None

    def is_launch(self, proc: psutil.Process) -> bool:
        """Whether `proc` belongs to a run's launch (which outlives the master by design)."""
        env = _env(proc)
        return env.get(CLUSTER_MARK) == str(self.home) or "SLURM_JOB_ID" in env

    def slurm_job(self, run_id: int) -> str | None:
        with contextlib.suppress(Exception):
            metadata = self.master.run(run_id).get("job_metadata") or {}
            job = (metadata.get("slurm") or {}).get("job_id")
            return str(job) if job else None
        return None

    # -- the slots' links
    def links(self) -> list[str]:
        """The host ends of this master's slot links (`mlb<tag>h<slot>`), local driver only."""
        if self.slurm is not None:
            return []
        tag = home_tag(self.home)
        return [name for name in _link_names() if name.startswith(f"mlb{tag}h")]

    # -- the master's services
    def service(self, name: str) -> int | None:
        """The pid of one of the master's services (web, rq-runs, redis, collector)."""
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(self.master.state()["processes"][name])
        return None

    def supervisor(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(self.master.state()["pid"])
        return None

    # -- after `down`
    def leftovers(self) -> list[str]:
        """Everything of this master that still exists: processes that carry its home in
        their environment, its slots' namespaces, links and hosts files, Slurm jobs,
        containers."""
        found = [f"process {describe(p)}" for p in self.processes()]
        if self.slurm is None:
            tag = home_tag(self.home)
            found += [
                f"network namespace {ns}" for ns in _namespaces() if ns.startswith(f"mlb-{tag}-")
            ]
            found += [f"link {name}" for name in _link_names() if name.startswith(f"mlb{tag}")]
            found += [f"hosts file {p}" for p in NETNS_ETC.glob(f"mlb-{tag}-*")]
        else:
            found += [f"Slurm job {job}" for job in self.slurm_jobs()]
        found += [f"container {c}" for c in containers(str(self.home))]
        return found

    def processes(self) -> list[psutil.Process]:
        home = str(self.home)
        found = []
        for proc in psutil.process_iter():
            if proc.pid == os.getpid():
                continue
            env = _env(proc)
            if home in (env.get("MLBENCH_HOME"), env.get(CLUSTER_MARK)) and alive(proc):
                found.append(proc)
        return found

    def slurm_jobs(self) -> list[str]:
        """Jobs of the chaos run's own Slurm cluster that have not ended."""
        with contextlib.suppress(Exception):
            return [f"{j['job_id']} {j['name']} {j['job_state']}" for j in self.slurm.active_jobs()]
        return ["(squeue did not answer)"]


def describe(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"{proc.pid} {' '.join(proc.cmdline())[:160]}"
    return str(proc.pid)


def _env(proc: psutil.Process) -> dict[str, str]:
    return environ_of(proc)


def _with_env(name: str, value: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        if _env(proc).get(name) == value and alive(proc):
            found.append(proc)
    return found


def _link_names() -> list[str]:
    done = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=False)
    try:
        return [entry["ifname"] for entry in json.loads(done.stdout or "[]")]
    except (ValueError, KeyError):
        return []


def _namespaces() -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.split()]


def containers(home: str) -> list[str]:
    """Containers whose environment or mounts name the master's home, where a container
    engine answers (neither driver starts any; a driver that did would show up here)."""
    docker = shutil.which("docker")
    if docker is None:
        return []
    done = subprocess.run(
        [docker, "ps", "-q"], capture_output=True, text=True, check=False, timeout=20
    )
    if done.returncode != 0:
        return []  # no engine runs here: no container can be left
    found = []
    for cid in done.stdout.split():
        inspect = subprocess.run(
            [docker, "inspect", cid], capture_output=True, text=True, check=False, timeout=20
        )
        if home in inspect.stdout:
            found.append(cid)
    return found
