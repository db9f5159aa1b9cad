"""Algorithm studies through the API (issue 45): one request queues every cell's series
(algorithms x workloads x conditions over the seeds, plus a held-out variant per algorithm
and workload drawn after the algorithms were fixed); bad input is refused naming the
field with nothing stored or queued; cancelling drops what is queued. The scores from
stored grades: test_study_scores.py; a study run for real: tests/e2e/test_study.py."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Run, Series, Study, StudyCell
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import study_suite

pytestmark = pytest.mark.django_db

TINY = {
    "name": "tiny",
    "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}}],
    "workloads": ["logreg-epsilon"],
    "conditions": ["unlimited", "10mbit"],
    "seeds": [1],
}


def _nothing_stored() -> None:
    assert not Study.objects.exists() and not StudyCell.objects.exists()
    assert not Series.objects.exists() and not Run.objects.exists()


def test_a_study_queues_every_cell_and_draws_its_variants_after_the_algorithms(api, redis_settings):
    response = api.post("/api/studies/", TINY, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    labels = [a["label"] for a in body["algorithms"]]
    assert labels == ["allreduce (precision fp32)", "topk (density 0.1)"]  # options completed
    assert body["algorithms"][1]["options"] == {"density": 0.1}
    assert body["suite_version"] == study_suite.SUITE_VERSION and body["cluster"] == "local"
    cells = body["cells"]
    base = [(c["algorithm"], c["condition"]) for c in cells if not c["variant"]]
    assert base == [(a, c) for a in labels for c in ("unlimited", "10mbit")]
    held = [c for c in cells if c["variant"]]
    assert [c["algorithm"] for c in held] == labels
    assert {c["condition"] for c in held} == {study_suite.HELD_OUT_CONDITION}
    assert body["runs"]["total"] == 6 and body["score"] is None and body["pending_runs"] == 6
    # The draw is recorded and reproducible from its seed; it differs from the workload.
    drawn = body["held_out"]
    assert drawn["seed"] >= study_suite.VARIANT_SEED_FLOOR
    again = study_suite.draw_variant("logreg-epsilon", drawn["seed"])
    variant = drawn["variants"]["logreg-epsilon"]
    assert (variant["data_seed"], variant["batch_size"]) == (again.data_seed, again.batch_size)
    # Each run carries its cell: the condition's rate, the variant's seed and batch.
    slow = Run.objects.get(series_id=cells[1]["series"])
    assert (slow.max_bandwidth, slow.algorithm, slow.dataset) == (10, "allreduce", "synthetic")
    assert slow.time_budget == study_suite.WORKLOADS["logreg-epsilon"].time_budget
    assert slow.name == "tiny: allreduce on logreg-epsilon at 10mbit (seed 1, 2 workers)"
    odd = Run.objects.get(series_id=held[1]["series"])
    assert (odd.seed, odd.batch_size, odd.algorithm) == (again.data_seed, again.batch_size, "topk")
    argv = worker_argv(lifecycle.run_spec(odd))
    assert argv[argv.index("--batch-size") + 1] == str(again.batch_size)
    assert api.get("/api/studies/").json()[0]["id"] == body["id"]


def test_a_sized_workload_reaches_the_worker_as_its_flags(api, redis_settings):
    body = {**TINY, "workloads": ["resnet20-cifar10"], "conditions": ["unlimited"],
            "held_out": False}  # fmt: skip
    response = api.post("/api/studies/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["held_out"] is None
    run = Run.objects.filter(task="resnet20-cifar10").first()
    assert (run.train_examples, run.test_examples) == (2560, 500)
    argv = worker_argv(lifecycle.run_spec(run))
    assert argv[argv.index("--train-images") + 1] == "2560"
    assert argv[argv.index("--test-images") + 1] == "500"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"algorithms": ["allreduce", "sgd-with-magic"]}, "algorithms", "sgd-with-magic"),
        (
            {"algorithms": [{"algorithm": "topk", "options": {"density": 7}}]},
            "algorithms",
            "density",
        ),
        ({"algorithms": [{"algorithm": "topk", "options": {"nope": 1}}]}, "algorithms", "nope"),
        ({"algorithms": ["allreduce", {"algorithm": "allreduce"}]}, "algorithms", "twice"),
        ({"algorithms": []}, "algorithms", "list the algorithms"),
        ({"workloads": ["imagenet-in-a-minute"]}, "workloads", "imagenet-in-a-minute"),
        ({"conditions": ["carrier-pigeon"]}, "conditions", "carrier-pigeon"),
        ({"seeds": [1, 1]}, "seeds", "once"),
        ({"seeds": [5000]}, "seeds", "5000"),
        ({"num_workers": 1}, "num_workers", "2 or more"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_queued(
    api, redis_settings, change, field, words
):
    response = api.post("/api/studies/", {**TINY, **change}, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and words in str(errors[field]), errors
    _nothing_stored()


def test_a_condition_this_master_does_not_allow_and_too_many_runs(api, redis_settings, settings):
    settings.MLBENCH_MAX_BANDWIDTH = 500
    response = api.post("/api/studies/", {**TINY, "conditions": ["1gbit"]}, format="json")
    assert response.status_code == 400 and "MLBENCH_MAX_BANDWIDTH" in str(response.json())
    # The held-out variants run at 1gbit too: refused by the same rule, under conditions.
    response = api.post("/api/studies/", {**TINY, "conditions": ["10mbit"]}, format="json")
    assert response.status_code == 400 and "conditions" in response.json()["errors"]
    settings.MLBENCH_MAX_BANDWIDTH = 10000
    settings.MLBENCH_STUDY_MAX_RUNS = 5
    response = api.post("/api/studies/", TINY, format="json")
    assert response.status_code == 400
    said = str(response.json()["errors"]["runs"])
    assert "make 6 runs" in said and "MLBENCH_STUDY_MAX_RUNS" in said
    _nothing_stored()


def test_cancelling_drops_the_queued_runs_and_keeps_the_study(api, redis_settings):
    study = api.post("/api/studies/", TINY, format="json").json()
    response = api.post(f"/api/studies/{study['id']}/cancel/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "cancelled" and body["cancelled_at"]
    assert not Run.objects.filter(state__in=[Run.QUEUED, *Run.ACTIVE_STATES]).exists()
    assert api.post(f"/api/studies/{study['id']}/cancel/").status_code == 409
    assert api.get("/api/studies/999999/").status_code == 404
