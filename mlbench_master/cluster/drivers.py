"""Which cluster driver the master uses (MLBENCH_CLUSTER=local|kubernetes|slurm).

Apart from base.py so that the protocol module imports no driver: each driver imports
the protocol, and only this module imports the drivers.
"""

from __future__ import annotations

from django.conf import settings

from mlbench_master.cluster.base import ClusterDriver, ClusterError


def get_driver(name: str | None = None) -> ClusterDriver:
    """The driver configured by settings.MLBENCH_CLUSTER (or `name`)."""
    if name is None:
        name = settings.MLBENCH_CLUSTER
    # Each driver (and its client library) is loaded only when its cluster is used.
    if name == "local":
        from mlbench_master.cluster.local import LocalCluster

        return LocalCluster()
    if name == "kubernetes":
        from mlbench_master.cluster.kubernetes import KubernetesCluster

        return KubernetesCluster()
    if name == "slurm":
        from mlbench_master.cluster.slurm import SlurmCluster

        return SlurmCluster()
    raise ClusterError(
        f"MLBENCH_CLUSTER={name!r} is not a cluster driver; use 'local', 'kubernetes' or 'slurm'"
    )


def driver_problems(name: str | None = None) -> list[str]:
    """What keeps the configured driver from running workers now, in words (bad settings,
    an unreachable scheduler); [] when nothing does. Never raises: the master says these at
    start and on the Workers page, and goes on serving (no run is lost to them)."""
    try:
        driver = get_driver(name)
    except ClusterError as exc:
        return [str(exc)]
    except Exception as exc:  # noqa: BLE001 - a broken driver is a problem to show, too
        return [f"the cluster driver cannot be set up: {type(exc).__name__}: {exc}"]
    try:
        return driver.problems()
    except Exception as exc:  # noqa: BLE001
        return [f"the {driver.name} driver cannot be asked: {type(exc).__name__}: {exc}"]
