"""The summary of a run of an uploaded algorithm agrees with the run the master shows (issue
44): the worker's record is built from the very command line the master gives the ranks,
so its `algorithm` is the file's declared NAME, its options the master's completed ones and
its `algorithm_source` the run's hash; the master's summary check accepts it, and a
summary that says another hash in the wrong type is refused naming the field.

Why here and not only in a live run: the live runs (tests/e2e, tests/slurm) need MPI and
minutes; this holds the master's command line, the worker's parser and record and the
master's summary check to each other in a second, so a change to any of them that breaks
the agreement fails in the plain suite."""

from __future__ import annotations

import math
from typing import Any

import pytest

from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import algorithm_source
from mlbench_worker.training.options import parse_args
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.run_record import RunFacts, run_record
from tests.api.conftest import worker_client
from tests.api.test_outside_algorithm import SHA, SOURCE, create, upload

pytestmark = pytest.mark.django_db


def _record_for(argv: list[str]) -> dict[str, Any]:
    """The summary a rank started with `argv` writes: the algorithm as the registry loads it
    (its declared NAME, the options completed by the declaration), measured values made up."""
    config = parse_args(argv[argv.index("mlbench_worker") + 1 :])
    declared = algorithm_source.read(SOURCE)
    options, problems = algorithm_source.check_options(declared, config.algorithm_options)
    assert not problems
    facts = RunFacts(
        dataset="synthetic", dataset_note="", num_workers=2, backend="gloo", device="cpu",
        threads=1, peak_lr=0.1, comm_share=0.1, comm_share_total=0.1,
        comm_bytes_per_step=2000.0, comm_bytes_to_target=None, full_allreduce_bytes=8004, versions={"torch": "2"},
        hardware={"cpu_model": "x"}, algorithm=declared.name, algorithm_options=options,
    )  # fmt: skip
    progress = Progress(epochs_done=1, val_accuracy=0.9, best_val_accuracy=0.9,
                        time_to_target=3.0, stop_reason="target reached")  # fmt: skip
    return run_record(config, facts, progress, target_accuracy=0.8, throughput=math.nan,
                      elapsed=4.0)  # fmt: skip


def test_the_summary_of_an_uploaded_algorithm_names_what_the_run_shows(
    staff_api, api, redis_settings
):
    assert upload(staff_api).status_code == 201
    made = create(api, task="logreg-epsilon", algorithm_source=SHA,
                  algorithm_options={"weight": "0.25"})  # fmt: skip
    assert made.status_code == 201, made.json()
    run = Run.objects.get(pk=made.json()["id"])
    summary = _record_for(worker_argv(lifecycle.run_spec(run)))
    # The worker's config held the options as text ("0.25"): the record has them typed.
    assert summary["algorithm_options"] == {"weight": 0.25, "mode": "sum"}

    posted = worker_client(run).post(f"/api/runs/{run.pk}/summary/", summary, format="json")
    assert posted.status_code == 200, posted.json()
    shown = api.get(f"/api/runs/{run.pk}/").json()
    for field in ("algorithm", "algorithm_options", "algorithm_source"):
        assert shown["summary"][field] == shown[field], field
    assert (shown["algorithm"], shown["algorithm_source"]) == ("halfavg", SHA)


def test_a_summary_with_a_hash_that_is_not_text_is_refused_naming_it(make_run):
    run = make_run(state=Run.STARTED, task="logreg-epsilon", algorithm="halfavg",
                   algorithm_source=SHA)  # fmt: skip
    argv = worker_argv(lifecycle.run_spec(run))
    summary = {**_record_for(argv), "algorithm_source": 12}
    refused = worker_client(run).post(f"/api/runs/{run.pk}/summary/", summary, format="json")
    assert refused.status_code == 400
    assert "algorithm_source must be a text, got 12" in str(refused.json())
    assert Run.objects.get(pk=run.pk).summary == {}
