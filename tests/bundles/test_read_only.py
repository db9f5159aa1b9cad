"""An imported run is its origin's record: nobody changes it through the API, only staff
delete it, it cannot be resumed as if it were local, and no driver ever touches it. It can
be read, compared and listed like any run."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Metric, Run, Series
from mlbench_master.runs import lifecycle
from tests.bundles import data

pytestmark = pytest.mark.django_db


@pytest.fixture
def imported(installations, staff) -> Series:
    series = data.finished_series(staff)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    installations.use("here")
    response = data.post_bundle(staff, bundle)
    assert response.status_code == 201
    return Series.objects.get(pk=response.json()["series"][0])


def _first(series: Series) -> Run:
    return series.runs.order_by("id").first()


def test_not_changeable_through_the_api(imported, staff, user):
    run = _first(imported)
    before = data.points(run)
    point = {"run_id": run.pk, "name": "val_accuracy", "value": 1.0}
    response = staff.post("/api/metrics/", [point], format="json")
    assert response.status_code == 409 and "read-only" in response.json()["detail"]
    response = staff.post(f"/api/runs/{run.pk}/summary/", {"x": 1}, format="json")
    assert response.status_code == 409 and "imported" in response.json()["detail"]
    response = staff.post(
        f"/api/runs/{run.pk}/predictions/?dataset=synthetic", b"x", content_type="application/zip"
    )
    assert response.status_code == 409
    # Cancelling (the dashboard's one write) finds nothing to cancel: it ended at its origin.
    assert staff.post(f"/runs/{run.pk}/cancel/").status_code == 409
    assert data.points(run) == before
    run.refresh_from_db()
    assert run.state == Run.FINISHED and run.origin is not None


def test_deleted_by_staff_only(imported, staff, user, installations):
    run = _first(imported)
    files = installations.homes["here"] / "predictions" / str(run.pk)
    assert files.is_dir()
    response = user.delete(f"/api/runs/{run.pk}/")
    assert response.status_code == 403 and "only a staff user" in response.json()["detail"]
    response = user.delete(f"/api/series/{imported.pk}/")
    assert response.status_code == 403
    assert Run.objects.filter(pk=run.pk).exists() and Series.objects.filter(pk=imported.pk).exists()
    assert staff.delete(f"/api/runs/{run.pk}/").status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not Metric.objects.filter(run_id=run.pk).exists() and not files.exists()


def test_not_resumable(imported, user, redis_settings):
    # Even with a checkpoint recorded, the checkpoint's files stayed at its origin.
    other = imported.runs.order_by("id").last()
    Metric.objects.create(run=other, name="checkpoint", value=1, metadata={"identity": {}})
    body = {"name": "again", "num_workers": other.num_workers, "resume_from": other.pk}
    response = user.post("/api/runs/", body, format="json")
    assert response.status_code == 400
    assert "imported from another installation" in response.json()["errors"]["resume_from"][0]
    assert not Run.objects.filter(name="again").exists()


def test_no_driver_touches_it(imported, staff, monkeypatch):
    """Deleting an imported run (staff) asks no driver to cancel or remove checkpoints."""
    from mlbench_master.cluster import drivers

    def no_driver():
        raise AssertionError("a driver was asked about an imported run")

    monkeypatch.setattr(drivers, "get_driver", no_driver)
    run = _first(imported)
    lifecycle.delete_run(run, by="root", staff=True)
    with pytest.raises(lifecycle.ReadOnlyRun):
        lifecycle.delete_run(imported.runs.first(), by="alice")
    assert lifecycle.cancel_run(imported.runs.first()) is False


def test_read_compared_and_listed_like_any_run(imported, user):
    run = _first(imported)
    assert user.get(f"/api/runs/{run.pk}/").json()["origin"]["origin_run"] != run.pk
    assert user.get(f"/api/runs/{run.pk}/mllog/").status_code == 200
    assert user.get(f"/api/metrics/{run.pk}/?metric_type=run").json()["val_accuracy"]
    assert user.get(f"/api/runs/{run.pk}/logs/").json()["chunks"]
    stats = user.get(f"/api/series/{imported.pk}/").json()["statistics"]
    assert [g["num_workers"] for g in stats["groups"]] == [1, 2]
    assert stats["groups"][0]["valid"] is True
