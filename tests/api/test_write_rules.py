"""Who may write a run's results: its metric points and its summary.

Only the run's own worker token or a staff user; pod metrics only staff; a summary only
until MLBENCH_RUN_TOKEN_GRACE seconds after the run ended. Any other account would
otherwise be able to forge published results.
"""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from mlbench_master.api.models import Metric, Run
from tests.api.conftest import worker_client
from tests.summaries import summary_body

pytestmark = pytest.mark.django_db

RESULT = summary_body(dataset="cifar10", final_val_accuracy=0.99)


@pytest.fixture
def bobs_run(make_run):
    """A finished run started by another user, with its real summary."""
    bob = User.objects.create_user("bob")
    return make_run(
        created_by=bob,
        summary={"dataset": "synthetic", "reached": False},
        dataset_used="synthetic",
        finished_at=timezone.now() - dt.timedelta(seconds=5),
    )


def _ended(run, seconds_ago):
    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, finished_at=timezone.now() - dt.timedelta(seconds=seconds_ago)
    )


def _unchanged(run):
    stored = Run.objects.get(pk=run.pk)
    return stored.summary == run.summary and stored.dataset_used == run.dataset_used


# --- summary ---------------------------------------------------------------------------


def test_user_token_may_not_overwrite_anothers_summary(api, bobs_run):
    r = api.post(f"/api/runs/{bobs_run.pk}/summary/", RESULT, format="json")
    assert r.status_code == 403
    detail = r.json()["detail"]
    assert "worker token" in detail and "staff" in detail and "'alice'" in detail
    assert _unchanged(bobs_run)


def test_user_token_may_not_post_the_summary_of_its_own_run(api, make_run):
    alice = User.objects.get(username="alice")
    own = make_run(state=Run.STARTED, created_by=alice)
    assert api.post(f"/api/runs/{own.pk}/summary/", RESULT, format="json").status_code == 403
    assert Run.objects.get(pk=own.pk).summary == {}


def test_worker_token_of_run_a_may_not_post_summary_of_run_b(run, bobs_run):
    r = worker_client(run).post(f"/api/runs/{bobs_run.pk}/summary/", RESULT, format="json")
    assert r.status_code == 403
    assert (
        f"worker token of run {run.pk} may not post the summary of run {bobs_run.pk}"
        in (r.json()["detail"])
    )
    assert _unchanged(bobs_run)


def test_staff_may_post_a_missing_summary_within_the_grace_never_replace_one(
    staff_api, bobs_run, settings
):
    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    r = staff_api.post(f"/api/runs/{bobs_run.pk}/summary/", RESULT, format="json")
    assert r.status_code == 409 and "write-once" in r.json()["detail"]  # it has one
    assert _unchanged(bobs_run)
    Run.objects.filter(pk=bobs_run.pk).update(summary={}, dataset_used="")  # still in flight
    r = staff_api.post(f"/api/runs/{bobs_run.pk}/summary/", RESULT, format="json")
    assert r.status_code == 200, r.json()
    assert Run.objects.get(pk=bobs_run.pk).dataset_used == "cifar10"


def test_staff_summary_after_the_grace_period_is_a_409(staff_api, bobs_run, settings):
    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    _ended(bobs_run, 90)
    r = staff_api.post(f"/api/runs/{bobs_run.pk}/summary/", RESULT, format="json")
    assert r.status_code == 409
    detail = r.json()["detail"]
    assert f"run {bobs_run.pk} ended at" in detail and "MLBENCH_RUN_TOKEN_GRACE (60)" in detail
    assert _unchanged(bobs_run)


def test_worker_summary_within_and_after_the_grace_period(run, settings):
    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    _ended(run, 30)  # rank 0 reports just after mpirun exited: accepted
    r = worker_client(run).post(
        f"/api/runs/{run.pk}/summary/", summary_body(dataset="a"), format="json"
    )
    assert r.status_code == 200
    _ended(run, 90)
    r = worker_client(run).post(
        f"/api/runs/{run.pk}/summary/", summary_body(dataset="b"), format="json"
    )
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    assert Run.objects.get(pk=run.pk).dataset_used == "a"


def test_staff_session_may_post_a_summary(run):
    client = APIClient()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    r = client.post(f"/api/runs/{run.pk}/summary/", summary_body(dataset="x"), format="json")
    assert r.status_code == 200


# --- metrics ---------------------------------------------------------------------------


def test_user_token_may_not_post_run_metrics(api, bobs_run, run):
    for target in (bobs_run, run):  # a finished run of another user, an active one
        point = {"run_id": target.pk, "name": "val_accuracy", "value": 0.99}
        r = api.post("/api/metrics/", point, format="json")
        assert r.status_code == 403
        assert "worker token" in r.json()["detail"] and "'alice'" in r.json()["detail"]
    assert not Metric.objects.exists()


def test_user_token_may_not_post_pod_metrics(api):
    r = api.post("/api/metrics/", {"pod_name": "w-0", "name": "cpu", "value": 1}, format="json")
    assert r.status_code == 403 and "pod metrics only by a staff user" in r.json()["detail"]
    assert not Metric.objects.exists()


def test_user_token_still_reads_metrics(api, run):
    assert api.get("/api/metrics/").status_code == 200
    assert api.get(f"/api/metrics/{run.pk}/?metric_type=run").status_code == 200


def test_staff_may_post_run_and_pod_metrics(staff_api, bobs_run):
    points = [
        {"run_id": bobs_run.pk, "name": "val_accuracy", "value": 0.5},
        {"pod_name": "w-0", "name": "cpu_cores", "value": 1.5},
    ]
    assert staff_api.post("/api/metrics/", points, format="json").status_code == 201
    assert Metric.objects.count() == 2


def test_worker_token_of_run_a_may_not_post_metrics_of_finished_run_b(run, bobs_run):
    point = {"run_id": bobs_run.pk, "name": "val_accuracy", "value": 0.99}
    r = worker_client(run).post("/api/metrics/", point, format="json")
    assert r.status_code == 403
    assert f"run {run.pk} may not post metrics of run {bobs_run.pk}" in r.json()["detail"]
    assert not Metric.objects.exists()


def test_worker_metrics_after_the_grace_period_are_refused(run, settings):
    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    _ended(run, 90)
    point = {"run_id": run.pk, "name": "val_accuracy", "value": 0.99}
    assert worker_client(run).post("/api/metrics/", point, format="json").status_code == 401
    assert not Metric.objects.exists()
