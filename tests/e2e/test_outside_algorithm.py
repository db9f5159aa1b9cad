"""A researcher's own algorithm through the whole stack (issue 44): uploaded with
POST /api/algorithms/, named by its SHA-256 in POST /api/runs/, on 2 ranks of the local
driver: each rank fetches the file with the run's worker token, checks its hash, imports it
and trains task 2 with it to its light target; the run shows name, hash and options."""

from __future__ import annotations

import hashlib

import pytest
import requests

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# Random-k sparsification with error feedback, in the public interface only: every rank
# draws the same k indices from the run's seed and sums its error-corrected gradient there.
SOURCE = b"""
import torch

from mlbench_worker.algorithms.public import Algorithm, Option

NAME = "randk-e2e"
API = 1
OPTIONS = (
    Option("density", "float", 0.25, "fraction of entries sent", above=0.0, maximum=1.0),
)


class RandK(Algorithm):
    def __init__(self, parts, options):
        super().__init__(parts, options)
        self.k = max(1, int(options["density"] * self.grads.numel))
        self.memory = torch.zeros(self.grads.numel)
        self.gen = torch.Generator().manual_seed(parts.seed)

    def finish(self) -> float:
        self.sum_scalars()
        g = self.grads.grads
        self.memory.add_(g)
        chosen = torch.randperm(g.numel(), generator=self.gen)[: self.k]
        values = self.memory[chosen].clone()
        self.memory[chosen] = 0.0
        self.wire.allreduce_(values)
        g.zero_()
        g[chosen] = values
        return 0.0
"""
SHA = hashlib.sha256(SOURCE).hexdigest()


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
