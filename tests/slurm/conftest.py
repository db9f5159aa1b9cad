"""A real Slurm for the tests: munged, slurmctld and two slurmd nodes (n1, n2) on this
machine, started by scripts/slurm/local-cluster.sh under a temporary directory on free
loopback ports, and stopped (every job and process with them) at the end of the session.

Without Slurm's programs the tests are skipped with the reason on a developer's machine,
and fail under CI (CI=true): there they must run (`make test-deps` installs them).

Fixtures:
- `slurm_cluster` (session): the cluster (its SLURM_CONF and folder);
- `slurm_master` (session): an embedded master started with `mlbench up --cluster slurm`
  on it, on the session's PostgreSQL; `master` is it with no run active;
- `chromium` (module): Debian's Chromium through Playwright, for the Workers page.

At the end of the session the cluster is stopped with a job still running, and nothing it
started may be left: no munged, no process whose environment names its slurm.conf.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mlbench_master.cluster.slurm import SlurmCluster as SlurmDriver
from mlbench_master.cluster.slurm.config import SlurmConfig
from tests.slurm.live import (
    SETUP,
    SlurmCluster,
    job_processes,
    slurm_env,
    start_slurm_master,
    wait_until,
)
from tests.worker.helpers import FLINK_JVM_ENV, FLINK_PYTHON, SPARK_JVM_ENV

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")


def _missing() -> list[str]:
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    return [p for p in PROGRAMS if shutil.which(p, path=path) is None]


def _unavailable(message: str) -> None:
    """Skip with the reason on a developer's machine; under CI these tests must run."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " (under CI the Slurm tests must run)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    missing = _missing()
    if missing:
        _unavailable(f"Slurm is not installed here ({', '.join(missing)} missing): make test-deps")
    cluster = SlurmCluster.up(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        _down_leaves_nothing(cluster)


def _down_leaves_nothing(cluster: SlurmCluster) -> None:
    """`local-cluster.sh down` with a job running on both nodes: the job's processes, the
    daemons and munged all end (a teardown error names what is left)."""
    started: list = []
    try:
        job = cluster.tool(
            "sbatch", "--parsable", "-N2", "-o", "/dev/null", "--wrap", "srun sleep 300"
        ).strip()

        def both_sleep() -> bool:
            started[:] = job_processes(job)
            return sum(_name(p) == "sleep" for p in started) == 2

        wait_until(both_sleep, 30, f"job {job} did not start on both nodes")
    finally:
        cluster.down()
    alive = [f"{_name(p)} (pid {p.pid})" for p in started if _lives(p)]
    left = cluster.leftovers() + alive
    assert not left, f"`local-cluster.sh down {cluster.directory}` left: {left}"


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def _lives(proc: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie waits here for a PID 1 that may never
    reap it: it holds nothing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(scope="session")
def slurm_master(slurm_cluster, postgres_url, tmp_path_factory):
    # Its jobs get its environment (sbatch --export=ALL): the Spark and Flink runs' JVMs get
    # the short runs' options (C1 only, the serial collector; tests/worker/helpers.py), and
    # Flink runs their ranks' own Python (.venv-flink).
    live = start_slurm_master(
        postgres_url,
        tmp_path_factory.mktemp("slurm-home"),
        {**slurm_env(slurm_cluster), **SPARK_JVM_ENV, **FLINK_JVM_ENV,
         "MLBENCH_FLINK_PYTHON": FLINK_PYTHON},
    )  # fmt: skip
    yield live
    live.down()


@pytest.fixture(scope="module")
def chromium():
    """Chromium through Playwright for one module: closed with it, so no Playwright event
    loop is left in this thread for the ORM tests of other packages."""
    from tests.browser.conftest import CHROMIUM, launched_chromium

    if not Path(CHROMIUM).exists():
        _unavailable(f"Chromium not found at {CHROMIUM}: make test-deps")
    with launched_chromium() as browser:
        yield browser


@pytest.fixture
def master(slurm_master, slurm_cluster):
    """The Slurm master with no run active and no job on the cluster (a test that failed
    half-way may have left either)."""
    for run in slurm_master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            slurm_master.delete(f"/api/runs/{run['id']}/")
    slurm_cluster.cancel_all()
    return slurm_master


@pytest.fixture
def driver(slurm_cluster, tmp_path) -> SlurmDriver:
    """The Slurm driver on the session's cluster, its job folders under the test's tmp."""
    config = SlurmConfig(
        python=sys.executable, mpirun="mpirun", setup=SETUP,
        directory=str(tmp_path / "slurm"), slurm_conf=slurm_cluster.conf,
    )  # fmt: skip
    return SlurmDriver(config)
