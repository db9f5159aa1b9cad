"""The flink implementation through the master's rules and launch, without training: its
ranks run the Python MLBENCH_FLINK_PYTHON names (the catalogue's `python_setting`), for the
command mpirun and srun start and for the probe that refuses a run whose workers lack
pyflink or Java; what it cannot run is refused at POST /api/runs/ with a 400 naming the
field, as for every implementation (run_rules/implementations.py)."""

from __future__ import annotations

import sys

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_master.cluster.local.driver import LocalCluster
from mlbench_master.cluster.mpirun import driver_argv, srun_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared.implementation_catalogue import IMPLEMENTATIONS

from ..worker.helpers import FLINK_PYTHON, have_flink

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_MAX_WORKERS = 4
    settings.MLBENCH_MAX_CPUS = 2.0
    settings.MLBENCH_MAX_GPUS = 1
    settings.MLBENCH_FLINK_PYTHON = ""


@pytest.fixture
def api(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('alice', create_user=True)}")
    return client


def create(client, **fields):
    return client.post(
        "/api/runs/", {"name": "flink", "task": "logreg-epsilon", **fields}, format="json"
    )


def test_the_catalogue_names_flinks_python_setting_and_only_flink_has_one():
    assert IMPLEMENTATIONS["flink"].python_setting == "MLBENCH_FLINK_PYTHON"
    assert IMPLEMENTATIONS["flink"].algorithms == ("allreduce",)
    assert [i.name for i in IMPLEMENTATIONS.values() if i.python_setting] == ["flink"]


def test_ranks_of_a_flink_run_get_its_python_and_the_others_the_drivers(
    api, redis_settings, settings, monkeypatch
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module, python=None: True)
    settings.MLBENCH_FLINK_PYTHON = "/opt/flink-env/bin/python"
    driver = LocalCluster()
    flink = create(api, implementation="flink", dataset="synthetic")
    assert flink.status_code == 201, flink.json()
    reference = create(api, dataset="synthetic", queue=True)
    assert reference.status_code == 201, reference.json()
    flink_spec = lifecycle.run_spec(Run.objects.get(pk=flink.json()["id"]))
    ref_spec = lifecycle.run_spec(Run.objects.get(pk=reference.json()["id"]))
    argv = driver_argv(driver, flink_spec, None)
    assert (
        "/opt/flink-env/bin/python" in argv and argv[argv.index("--implementation") + 1] == "flink"
    )
    assert driver.python_for("flink") == "/opt/flink-env/bin/python"
    assert sys.executable in driver_argv(driver, ref_spec, None)
    assert "/opt/flink-env/bin/python" in srun_argv(flink_spec, python=driver.python_for("flink"))
    settings.MLBENCH_FLINK_PYTHON = ""  # unset: the driver's own Python
    assert driver.python_for("flink") == sys.executable


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"algorithm": "powersgd"}, "implementation", "runs algorithm allreduce only"),
        ({"algorithm": "lbfgs"}, "implementation", "runs on implementation spark only"),
        ({"gpu_enabled": True}, "gpu_enabled", "trains on CPUs only"),
        ({"backend": "gloo"}, "backend", "leave backend out"),
    ],
)
def test_what_flink_cannot_run_is_refused_naming_the_field(
    api, redis_settings, monkeypatch, fields, field, words
):
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module, python=None: True)
    response = create(api, implementation="flink", **fields)
    assert response.status_code == 400, response.json()
    assert words in " ".join(map(str, response.json()["errors"][field])), response.json()


def test_workers_whose_flink_python_lacks_pyflink_are_refused_with_the_hint(
    api, redis_settings, settings
):
    # The probe runs for real: this interpreter (the master's) has no pyflink.
    settings.MLBENCH_FLINK_PYTHON = sys.executable
    response = create(api, implementation="flink")
    assert response.status_code == 400, response.json()
    text = " ".join(response.json()["errors"]["implementation"])
    assert "pyflink, which the workers' Python cannot import" in text
    assert f"checked with {sys.executable}" in text and "mlbench[flink]" in text


@pytest.mark.skipif(not have_flink(), reason=f"no pyflink in {FLINK_PYTHON}: make test-deps")
def test_workers_with_the_flink_python_are_accepted(api, redis_settings, settings):
    settings.MLBENCH_FLINK_PYTHON = FLINK_PYTHON
    response = create(api, implementation="flink", dataset="synthetic")
    assert response.status_code == 201, response.json()
    served = api.get("/api/runs/defaults/").json()
    assert served["implementations"]["flink"]["available"] is True, served["implementations"]


def test_rank_folders_left_by_killed_ranks_are_swept_and_live_ones_kept(tmp_path):
    """A rank killed before its `stop` leaves its Flink folder (its JVMs died with it); the
    next flink rank on the machine removes the folders whose process is gone."""
    import os
    import subprocess

    from mlbench_worker.implementations.flink.flink_cluster import PREFIX, sweep_leftovers

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{PREFIX}7-1-{gone.pid}-abc_def1"
    live = tmp_path / f"{PREFIX}7-0-{os.getpid()}-abc_def2"
    other = tmp_path / "mlbench-spark-7-0-abc"
    for folder in (dead, live, other):
        (folder / "conf").mkdir(parents=True)
    assert sweep_leftovers(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and other.exists()
