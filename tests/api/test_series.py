"""Run series through the API: one request queues the same run over seeds and worker
counts; bad input is refused naming the field and stores nothing; cancelling a series
leaves nothing of it queued or active. The queue itself: tests/api/test_queue.py."""

import pytest

from mlbench_master.api.models import Run, Series
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import jobqueue, lifecycle

pytestmark = pytest.mark.django_db

TASK = {"name": "logreg series", "task": "logreg-epsilon", "dataset": "synthetic"}


@pytest.fixture
def series_body():
    return {**TASK, "seeds": [1, 2, 3], "workers": [1, 2], "time_budget": 5}


def test_a_series_queues_its_runs_and_starts_the_first(api, redis_settings, series_body):
    response = api.post("/api/series/", series_body, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["seeds"] == [1, 2, 3] and body["worker_counts"] == [1, 2]
    assert body["settings"]["task"] == "logreg-epsilon" and "seeds" not in body["settings"]
    members = body["runs"]
    assert [(r["num_workers"], r["seed"]) for r in members] == [
        (1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3),
    ]  # fmt: skip
    names = [Run.objects.get(pk=r["id"]).name for r in (members[0], members[3])]
    assert names == [f"{series_body['name']} (seed 1, 1 worker)",
                     f"{series_body['name']} (seed 1, 2 workers)"]  # fmt: skip
    assert members[0]["state"] == Run.INITIALIZED and members[0]["queue_position"] is None
    assert [r["queue_position"] for r in members[1:]] == [1, 2, 3, 4, 5]
    assert all(r["state"] == Run.QUEUED for r in members[1:])
    first = Run.objects.get(pk=members[0]["id"])
    assert first.job_id and jobqueue.job_waiting(first.job_id)
    # Only the first has a job: the others wait in the master's queue, not in Redis.
    assert not Run.objects.filter(state=Run.QUEUED).exclude(job_id="").exists()
    run_json = api.get(f"/api/runs/{members[3]['id']}/").json()
    assert run_json["series"] == body["id"] and run_json["seed"] == 1
    assert run_json["manifest"]["config"]["seed"] == 1
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=members[4]["id"])))
    assert argv[argv.index("--seed") + 1] == "2"
    listed = api.get("/api/series/").json()
    assert [s["id"] for s in listed] == [body["id"]] and listed[0]["state"] == "running"


def test_repeats_mean_seeds_one_to_n_and_workers_default_to_the_runs(api, redis_settings):
    body = api.post("/api/series/", {**TASK, "repeats": 3}, format="json").json()
    assert body["seeds"] == [1, 2, 3] and body["worker_counts"] == [2]


def test_a_form_body_gives_seeds_and_workers_as_text(api, redis_settings):
    response = api.post("/api/series/", {**TASK, "seeds": "4,5", "workers": "1 2"})
    assert response.status_code == 201, response.content
    assert [(r["num_workers"], r["seed"]) for r in response.json()["runs"]] == [
        (1, 4), (1, 5), (2, 4), (2, 5),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"seeds": []}, "seeds", "at least one seed"),
        ({"seeds": [1, 2, 1]}, "seeds", "1 given twice"),
        ({"seeds": [1, -3]}, "seeds", "-3"),
        ({"seeds": ["x"]}, "seeds", "integer"),
        ({"seeds": None, "repeats": 0}, "repeats", "1 or more"),
        ({"repeats": 2}, "repeats", "not both"),
        ({"workers": []}, "workers", "at least one worker count"),
        ({"workers": [2, 2]}, "workers", "each worker count once"),
        ({"workers": [1, 9]}, "workers", "9 workers: num_workers must be between 1 and 4"),
        ({"num_workers": 2}, "num_workers", "leave num_workers out"),
        ({"seed": 3}, "seed", "leave seed out"),
        ({"resume_from": 1}, "resume_from", "from scratch"),
        ({"seeds": list(range(1, 17))}, "seeds", "32 runs, more than the 30"),
        ({"queue": True}, "queue", "unknown field"),
        ({"task": "nope"}, "task", "not known"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(api, series_body, change, field, words):
    body = {k: v for k, v in {**series_body, **change}.items() if v is not None}
    response = api.post("/api/series/", body, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert any(name.split(".")[0] == field for name in errors), errors
    assert words in str(errors), errors
    assert not Series.objects.exists() and not Run.objects.exists()


def test_the_most_runs_of_a_series_is_a_setting(api, settings, series_body):
    settings.MLBENCH_SERIES_MAX_RUNS = 5
    response = api.post("/api/series/", series_body, format="json")
    assert response.status_code == 400
    assert "MLBENCH_SERIES_MAX_RUNS" in response.json()["errors"]["seeds"][0]
    assert not Series.objects.exists() and not Run.objects.exists()


def test_an_unknown_series_is_404(api):
    for method, path in [
        ("get", "/api/series/999/"),
        ("delete", "/api/series/999/"),
        ("post", "/api/series/999/cancel/"),
    ]:
        response = getattr(api, method)(path)
        assert response.status_code == 404, (method, path)
    assert api.get("/api/series/abc/").status_code == 404


def test_cancelling_a_series_midway_leaves_none_active_and_none_queued(
    api, redis_settings, series_body
):
    created = api.post("/api/series/", series_body, format="json").json()
    first = Run.objects.get(pk=created["runs"][0]["id"])
    assert lifecycle.mark_started(first) and lifecycle.mark_finished(first, 0)
    second = Run.objects.get(pk=created["runs"][1]["id"])
    assert second.state == Run.INITIALIZED  # the queue moved on
    lifecycle.mark_started(second)
    # A run of another request queues behind the series.
    other = api.post("/api/runs/", {**TASK, "name": "after", "queue": True}, format="json")
    assert other.json()["queue_position"] == 5
    response = api.post(f"/api/series/{created['id']}/cancel/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "cancelled" and body["cancelled_at"]
    states = [r["state"] for r in body["runs"]]
    assert states == [Run.FINISHED] + [Run.CANCELLED] * 5
    assert not Run.objects.filter(series=created["id"], state__in=Run.ACTIVE_STATES).exists()
    assert not Run.objects.filter(series=created["id"], state=Run.QUEUED).exists()
    # The other request's run is next, and the only one active.
    assert Run.objects.get(pk=other.json()["id"]).state == Run.INITIALIZED
    assert api.post(f"/api/series/{created['id']}/cancel/").status_code == 409


def test_deleting_a_series_deletes_its_runs(api, redis_settings, series_body):
    created = api.post("/api/series/", series_body, format="json").json()
    assert api.delete(f"/api/series/{created['id']}/").status_code == 204
    assert not Series.objects.exists() and not Run.objects.exists()


def test_deleting_a_series_takes_the_rights_deleting_a_run_takes(
    api, redis_settings, series_body, settings
):
    """`mlbench delete --series` calls DELETE /api/series/<id>/: refused as DELETE of a run
    is, to a client without a token (reads being public changes nothing) and to a run's
    worker token; any user with a token may, as for a run."""
    from rest_framework.test import APIClient

    settings.MLBENCH_PUBLIC_READ = True
    created = api.post("/api/series/", series_body, format="json").json()
    member = Run.objects.get(pk=created["runs"][0]["id"])
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(member)}")
    for client, status in ((APIClient(), 401), (worker, 403)):  # no token; no right
        refused = client.delete(f"/api/series/{created['id']}/")
        assert refused.status_code == status, refused.content
        assert client.delete(f"/api/runs/{member.pk}/").status_code == status
    assert Series.objects.filter(pk=created["id"]).exists() and Run.objects.count() == 6
    assert api.delete(f"/api/series/{created['id']}/").status_code == 204
    assert not Series.objects.exists() and not Run.objects.exists()


def test_a_series_of_the_awd_lstm_queues_task_3a_runs_and_refuses_what_it_does_not_admit(
    api, redis_settings
):
    body = {"name": "lstm", "task": "awd-lstm-wikitext2", "dataset": "synthetic",
            "seeds": [1, 2], "workers": [2], "time_budget": 60, "algorithm": "powersgd"}  # fmt: skip
    response = api.post("/api/series/", body, format="json")
    assert response.status_code == 201, response.content
    members = response.json()["runs"]
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=members[1]["id"])))
    assert argv[3] == "awd-lstm-wikitext2" and argv[argv.index("--algorithm") + 1] == "powersgd"
    refused = api.post("/api/series/", {**body, "algorithm": "localsgd"}, format="json")
    assert refused.status_code == 400
    assert "running average" in refused.json()["errors"]["algorithm"][0]
