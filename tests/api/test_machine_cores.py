"""The CPUs a local run gets when it leaves them out fit the machine, and a run that asks
for more threads than the machine has cores is accepted with a warning
(mlbench_master/run_rules/cores.py).

Why: two workers of the table's 2 CPUs on a 2-core machine run 4 torch threads on 2
cores and train several times slower than 2 × 1 (issue 50). The machine is a local driver
that reports 2 cores (or 8), whatever this one has.
"""

import pytest

from mlbench_master import run_rules
from mlbench_master.cluster.local import driver as local_driver

pytestmark = pytest.mark.django_db


@pytest.fixture
def cores(monkeypatch):
    """Set how many cores the local driver reports."""

    def set_cores(n: int) -> None:
        monkeypatch.setattr(local_driver, "machine_cores", lambda: n)

    set_cores(2)
    return set_cores


def _post(api, **fields):
    response = api.post("/api/runs/", {"name": "fit", "queue": True, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_two_workers_without_cpus_on_two_cores_get_one_each_and_no_warning(
    api, redis_settings, cores
):
    run = _post(api, num_workers=2)
    assert run["num_cpus"] == 1.0
    assert run["warnings"] == []


def test_two_workers_of_two_cpus_on_two_cores_are_accepted_with_a_warning(
    api, redis_settings, cores
):
    run = _post(api, num_workers=2, num_cpus=2)
    assert run["num_cpus"] == 2.0
    [warning] = run["warnings"]
    assert "4 threads" in warning and "2 cores" in warning and "num_cpus 1" in warning
    # The stored run says it too, not only the response that created it.
    assert api.get(f"/api/runs/{run['id']}/").json()["warnings"] == [warning]


def test_more_workers_than_cores_get_one_cpu_each_and_say_they_do_not_fit(
    api, redis_settings, cores, settings
):
    settings.MLBENCH_LOCAL_WORKERS = 4  # slots enough: the cores are the question
    run = _post(api, num_workers=4)
    assert run["num_cpus"] == 1.0
    assert "at most 2 workers" in run["warnings"][0]


def test_a_bigger_machine_keeps_the_tables_default_and_the_served_default_follows(
    api, redis_settings, cores
):
    assert api.get("/api/runs/defaults/").json()["defaults"]["num_cpus"] == 1.0
    cores(8)
    served = api.get("/api/runs/defaults/").json()["defaults"]
    assert served["num_cpus"] == run_rules.DEFAULTS["num_cpus"] == 2.0
    run = _post(api, num_workers=2)
    assert run["num_cpus"] == 2.0 and run["warnings"] == []


def test_the_served_default_and_a_run_without_cpus_agree(api, redis_settings, cores):
    served = api.get("/api/runs/defaults/").json()["defaults"]
    run = _post(api)
    assert (run["num_workers"], run["num_cpus"]) == (served["num_workers"], served["num_cpus"])


def test_a_driver_without_cores_keeps_the_tables_default_and_never_warns(settings, cores):
    settings.MLBENCH_CLUSTER = "kubernetes"
    assert run_rules.machine_cores() is None
    assert run_rules.default_cpus(2) == 2.0
    assert run_rules.oversubscription(8, 2.0, None) is None


def test_a_share_never_exceeds_the_operators_limit(settings, cores):
    cores(64)
    settings.MLBENCH_MAX_CPUS = 1.5
    assert run_rules.default_cpus(2) == 1.5


def test_a_series_without_cpus_gives_every_worker_count_the_largest_counts_share(
    api, redis_settings, cores
):
    """A series compares its worker counts: on 2 cores, 1 worker of 2 CPUs beside 2 workers
    of 1 would measure the machine's sharing, not the scaling."""
    body = {"name": "scaling", "task": "logreg-epsilon", "dataset": "synthetic"}
    response = api.post("/api/series/", {**body, "seeds": [1], "workers": [1, 2]}, format="json")
    assert response.status_code == 201, response.json()
    runs = [api.get(f"/api/runs/{r['id']}/").json() for r in response.json()["runs"]]
    assert [r["num_workers"] for r in runs] == [1, 2]
    assert [r["num_cpus"] for r in runs] == [1.0, 1.0]
    # Asked for, the CPUs are every run's as given (and the 2 workers' run warns).
    response = api.post(
        "/api/series/", {**body, "seeds": [2], "workers": [1, 2], "num_cpus": 2}, format="json"
    )
    assert response.status_code == 201, response.json()
    ids = [r["id"] for r in response.json()["runs"]]
    assert [api.get(f"/api/runs/{i}/").json()["num_cpus"] for i in ids] == [2.0, 2.0]
