"""Which cluster driver the master uses (MLBENCH_CLUSTER=local|kubernetes).

Apart from base.py so that the protocol module imports no driver: each driver imports
the protocol, and only this module imports the drivers.
"""

from __future__ import annotations

from mlbench_master.cluster.base import ClusterDriver, ClusterError


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
