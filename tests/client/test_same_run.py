"""The same benchmark, started without options through the API, `mlbench run` and
ApiClient, is the same run: every setting it stores comes from the master's one table
(GET /api/runs/defaults/). The dashboard's form is held to the same table in
tests/browser/test_form_defaults.py.
"""

import pytest
import requests

from mlbench_worker.client.api import ApiClient
from tests.api.test_run_defaults import settings_of

pytestmark = pytest.mark.mpi


def _stop(master, run_id):
    master.delete(f"/api/runs/{run_id}/")


def _no_active_run(master):
    for run in master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            _stop(master, run["id"])


def test_api_cli_and_client_store_identical_settings_without_options(master):
    _no_active_run(master)
    made = {}
    response = requests.post(
        master.url + "/api/runs/", json={"name": "plain"}, headers=master.headers, timeout=30
    )
    assert response.status_code == 201, response.text
    made["api"] = response.json()
    _stop(master, made["api"]["id"])

    done = master.cli("run", "plain")
    assert done.returncode == 0, done.stdout + done.stderr
    made["cli"] = master.run(int(done.stdout.split()[1]))
    _stop(master, made["cli"]["id"])

    client = ApiClient(url=master.url, in_cluster=False, token=master.token)
    try:
        # The original client's signature: num_workers is positional, the rest defaulted.
        response = client.create_run("plain", 2).result()
        assert response.status_code == 201, response.text
        made["client"] = response.json()
        _stop(master, made["client"]["id"])
        served = client.run_defaults().result().json()
    finally:
        client.close()

    expected = settings_of(made["api"])
    for way in ("cli", "client"):
        assert settings_of(made[way]) == expected, way
    for name, value in served["defaults"].items():
        if value is not None and name not in ("time_limit", "algorithm_options"):
            assert expected[name] == value, name
    # {}: the algorithm's own defaults, which the table lists too
    algorithm = served["algorithms"][expected["algorithm"]]
    assert expected["algorithm_options"] == {o["name"]: o["default"] for o in algorithm["options"]}
