"""The protocol every cluster driver keeps.

A run's job talks to workers only through these methods, so the local driver (processes on
this machine) and the Kubernetes driver (a StatefulSet's pods) are interchangeable and the
orchestration code has a single path. Drivers never change a Run's state: they report
(return values, exceptions with reasons) and `mlbench_master.runs` decides.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol


class RunSpec(Protocol):
    """What a driver reads from a run (the `api.models.Run` row satisfies it)."""

    id: int
    task: str
    backend: str
    num_workers: int
    num_cpus: float
    max_bandwidth: int
    gpu_enabled: bool


class ClusterError(Exception):
    """A failure a person can act on; its message becomes the run's FAILED reason."""


class PrepareTimeout(ClusterError):
    """The workers did not become ready in time (the message names the pod and why)."""


@dataclass(frozen=True)
class PodInfo:
    """One worker slot, in the shape the API's /api/pods/ serves."""

    name: str
    labels: dict[str, str]
    phase: str
    ip: str
    node: str = ""


@dataclass(frozen=True)
class PodSample:
    """One resource reading of one worker (CPU cores in use, bytes of memory, network bytes)."""

    pod_name: str
    name: str
    value: float
    date: dt.datetime
    cumulative: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputLine:
    """A line of mpirun's output, attributed to the rank that wrote it when known."""

    rank: int | None
    stream: str  # "stdout" | "stderr"
    text: str


class Execution(ABC):
    """A launched mpirun: its output as it comes, its exit code, and a way to stop it."""

    @abstractmethod
    def read(self, timeout: float) -> list[OutputLine]:
        """Lines that arrived, waiting at most `timeout` seconds; [] when none came."""

    @abstractmethod
    def poll(self) -> int | None:
        """mpirun's exit code once it has exited and its output is drained, else None."""

    @abstractmethod
    def kill(self) -> None:
        """Stop mpirun and every rank it started; returns when they are gone."""


class ClusterDriver(ABC):
    """One implementation per kind of cluster; chosen by MLBENCH_CLUSTER."""

    name: str = ""

    @abstractmethod
    def pods(self) -> list[PodInfo]:
        """The worker slots that exist now."""

    @abstractmethod
    def prepare(self, run: RunSpec) -> list[str]:
        """Provide `run.num_workers` workers with the run's limits; return the mpirun hosts.

        An empty list means "this machine". Raises ClusterError (or PrepareTimeout) with a
        reason a person can act on.
        """

    @abstractmethod
    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        """Start the mpirun command `argv` (built by cluster.mpirun) with `env` added."""

    @abstractmethod
    def cancel(self, run: RunSpec) -> None:
        """Stop every process of `run`, from any process of the master (not only the job's)."""

    @abstractmethod
    def is_running(self, run: RunSpec) -> bool:
        """Whether ranks of `run` are still alive (used to reconcile after a master restart)."""

    @abstractmethod
    def pod_metrics(self) -> list[PodSample]:
        """A resource reading of every worker now; [] when none can be had."""


def get_driver(name: str | None = None) -> ClusterDriver:
    """The driver configured by settings.MLBENCH_CLUSTER (or `name`)."""
    if name is None:
        from django.conf import settings

        name = settings.MLBENCH_CLUSTER
    if name == "local":
        from mlbench_master.cluster.local import LocalCluster

        return LocalCluster()
    if name == "kubernetes":
        from mlbench_master.cluster.kubernetes import KubernetesCluster

        return KubernetesCluster()
    raise ClusterError(
        f"MLBENCH_CLUSTER={name!r} is not a cluster driver; use 'local' or 'kubernetes'"
    )
