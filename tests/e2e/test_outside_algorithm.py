"""A researcher's own algorithm through the whole stack (issue 44): uploaded with
POST /api/algorithms/, named by its SHA-256 in POST /api/runs/, on 2 ranks of the local
driver: each rank fetches the file with the run's worker token, checks its hash, imports it
and trains task 2 with it to its light target; the run shows name, hash and options."""

from __future__ import annotations

import pytest
import requests

from tests.outside_randk import randk_source

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# Random-k with error feedback, in the public interface only (tests/outside_randk.py).
SOURCE, SHA = randk_source("randk-e2e")


def test_an_uploaded_algorithm_trains_task_2_on_two_ranks_to_its_light_target(idle_master):
    master = idle_master
    stored = requests.post(
        master.url + "/api/algorithms/",
        data=SOURCE,
        headers={**master.headers, "Content-Type": "text/x-python"},
        timeout=30,
    )
    assert stored.status_code in (200, 201), stored.text
    assert (stored.json()["sha256"], stored.json()["name"]) == (SHA, "randk-e2e")
    run = master.create_run(
        name="outside", task="logreg-epsilon", dataset="synthetic", target="light",
        algorithm_source=SHA, algorithm_options={"density": 0.5}, max_epochs=8,
    )  # fmt: skip
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=300)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    assert (done["algorithm"], done["algorithm_source"]) == ("randk-e2e", SHA)
    assert done["algorithm_options"] == {"density": 0.5}
    assert done["division"] == "open"
    assert done["summary"]["reached"], done["summary"]
    assert done["manifest"]["algorithm"]["sha256"] == SHA
    assert done["summary"]["algorithm"] == "randk-e2e"
    for field in ("algorithm", "algorithm_options", "algorithm_source"):  # the run's own
        assert done["summary"][field] == done[field], field
