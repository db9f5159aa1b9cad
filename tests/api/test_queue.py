"""The master's queue: a run that asks to queue waits (QUEUED, with its place) behind the
active run, and the next one starts whichever way the active run ends."""

import pytest

from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle
from mlbench_master.runs.reconcile import reconcile

pytestmark = pytest.mark.django_db

RUN = {"name": "q", "task": "logreg-epsilon", "dataset": "synthetic", "num_workers": 1}


def post(api, **extra):
    return api.post("/api/runs/", {**RUN, **extra}, format="json")


def test_without_queue_a_second_run_is_409_and_with_it_queued(api, redis_settings):
    first = post(api).json()
    assert first["state"] == Run.INITIALIZED and first["seed"] == 42
    refused = post(api, name="plain")
    assert refused.status_code == 409 and '"queue": true' in refused.json()["detail"]
    second = post(api, name="second", queue=True)
    third = post(api, name="third", queue="true")
    assert second.status_code == third.status_code == 201
    assert (second.json()["state"], second.json()["queue_position"]) == (Run.QUEUED, 1)
    assert third.json()["queue_position"] == 2
    listed = {r["id"]: r["queue_position"] for r in api.get("/api/runs/").json()}
    assert listed == {first["id"]: None, second.json()["id"]: 1, third.json()["id"]: 2}
    assert Run.objects.count() == 3  # the 409 stored nothing


@pytest.mark.parametrize("ending", ["finished", "failed", "cancelled", "deleted", "reconciled"])
def test_the_next_queued_run_starts_whichever_way_the_active_one_ends(api, redis_settings, ending):
    active = Run.objects.get(pk=post(api).json()["id"])
    lifecycle.mark_started(active)
    waiting = [post(api, name=f"w{i}", queue=True).json()["id"] for i in range(2)]
    if ending == "finished":
        lifecycle.mark_finished(active, 0)
    elif ending == "failed":
        lifecycle.mark_failed(active, "mpirun exited with code 1", exit_code=1)
    elif ending == "cancelled":
        lifecycle.cancel_run(active)
    elif ending == "deleted":
        assert api.delete(f"/api/runs/{active.pk}/").status_code == 204
    else:  # ended behind the lifecycle's back (a crash): the reconciliation moves the queue
        Run.objects.filter(pk=active.pk).update(state=Run.FAILED)
        assert f"run {waiting[0]}: started from the queue" in reconcile()
    nxt = Run.objects.get(pk=waiting[0])
    assert nxt.state == Run.INITIALIZED and nxt.job_id
    assert Run.objects.get(pk=waiting[1]).state == Run.QUEUED
    assert api.get(f"/api/runs/{waiting[1]}/").json()["queue_position"] == 1


def test_a_plain_run_waits_its_turn_when_runs_are_queued(api, redis_settings):
    """Between one run's end and the next one's start nothing may jump the queue."""
    active = Run.objects.get(pk=post(api).json()["id"])
    queued = post(api, name="queued", queue=True).json()["id"]
    Run.objects.filter(pk=active.pk).update(state=Run.FINISHED)  # not yet moved on
    refused = post(api, name="jumps")
    assert refused.status_code == 409 and "1 run waits in the queue" in refused.json()["detail"]
    assert lifecycle.start_next().pk == queued


def test_a_queued_run_is_cancelled_or_deleted_without_touching_the_active_one(api, redis_settings):
    active = Run.objects.get(pk=post(api).json()["id"])
    one, two = (post(api, name=n, queue=True).json()["id"] for n in ("one", "two"))
    assert lifecycle.cancel_run(Run.objects.get(pk=one), reason="not needed")
    assert Run.objects.get(pk=one).state == Run.CANCELLED
    assert api.delete(f"/api/runs/{two}/").status_code == 204
    active.refresh_from_db()
    assert active.state == Run.INITIALIZED and not Run.objects.filter(state=Run.QUEUED).exists()


def test_a_queued_run_whose_job_redis_refuses_stays_queued(api, redis_settings, settings):
    active = Run.objects.get(pk=post(api).json()["id"])
    queued = post(api, name="queued", queue=True).json()["id"]
    settings.RQ_QUEUES = {"runs": {"URL": "redis://127.0.0.1:9/0"}}  # nothing listens there
    lifecycle.mark_finished(active, 0)
    waiting = Run.objects.get(pk=queued)
    assert waiting.state == Run.QUEUED and "could not be enqueued" in waiting.reason
    settings.RQ_QUEUES = {"runs": {"URL": redis_settings}}
    assert lifecycle.start_next().pk == queued


def test_a_bad_seed_is_refused_naming_it(api):
    for seed in (-1, 2**31, "x"):
        response = post(api, seed=seed)
        assert response.status_code == 400 and "seed" in response.json()["errors"]
    assert not Run.objects.exists()


def test_a_job_for_a_queued_run_leaves_it_to_the_queue(api, redis_settings):
    """A job that runs before its run's turn (a stale job of a run put back in the queue)
    starts nothing: the queue decides when the run starts."""
    from mlbench_master.runs.jobs import run_job

    post(api)
    queued = Run.objects.get(pk=post(api, name="waits", queue=True).json()["id"])
    assert run_job(queued.pk) == Run.QUEUED
    queued.refresh_from_db()
    assert queued.state == Run.QUEUED and queued.started_at is None
