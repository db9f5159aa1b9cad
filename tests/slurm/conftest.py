"""A real Slurm for the tests: munged, slurmctld and two slurmd nodes (n1, n2) on this
machine, started by scripts/slurm/local-cluster.sh under a temporary directory on free
loopback ports, and stopped (every job and process with them) at the end of the session.

Without Slurm's programs the tests are skipped with the reason on a developer's machine,
and fail under CI (CI=true): there they must run (`make test-deps` installs them).

Fixtures:
- `slurm_cluster` (session): the cluster (its SLURM_CONF and folder);
- `slurm_master` (session): an embedded master with MLBENCH_CLUSTER=slurm on it, on the
  session's PostgreSQL; `master` is it with no run active.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.slurm.live import SlurmCluster, slurm_env, start_slurm_master

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")


def _missing() -> list[str]:
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    return [p for p in PROGRAMS if shutil.which(p, path=path) is None]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    missing = _missing()
    if missing:
        message = f"Slurm is not installed here ({', '.join(missing)} missing): make test-deps"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " (under CI the Slurm tests must run)")
        pytest.skip(message)
    cluster = SlurmCluster.up(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def slurm_master(slurm_cluster, postgres_url, tmp_path_factory):
    live = start_slurm_master(
        postgres_url, tmp_path_factory.mktemp("slurm-home"), slurm_env(slurm_cluster)
    )
    yield live
    live.down()


@pytest.fixture
def master(slurm_master, slurm_cluster):
    """The Slurm master with no run active and no job on the cluster (a test that failed
    half-way may have left either)."""
    for run in slurm_master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            slurm_master.delete(f"/api/runs/{run['id']}/")
    slurm_cluster.cancel_all()
    return slurm_master
