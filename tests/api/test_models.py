"""The schema's own guarantees, checked on PostgreSQL: one owner per metric, unique uid,
at most one active run, metrics outliving pods."""

import pytest
from django.db import IntegrityError, transaction

from mlbench_master.api.models import Metric, Pod, Run

pytestmark = pytest.mark.django_db


def test_database_is_postgresql():
    from django.db import connection

    assert connection.vendor == "postgresql"


def test_metric_needs_exactly_one_of_run_or_pod():
    run = Run.objects.create(name="r", state=Run.FINISHED)
    Metric.objects.create(run=run, name="loss", value=1.0)
    Metric.objects.create(pod_name="worker-0", name="cpu_cores", value=0.5)
    for kwargs in ({"run": run, "pod_name": "worker-0"}, {}):
        with pytest.raises(IntegrityError, match="metric_run_xor_pod"), transaction.atomic():
            Metric.objects.create(name="x", value=1.0, **kwargs)


def test_uid_is_unique_but_optional():
    run = Run.objects.create(name="r", state=Run.FINISHED)
    Metric.objects.create(run=run, name="a", value=1, uid="u1")
    Metric.objects.create(run=run, name="a", value=1)
    Metric.objects.create(run=run, name="a", value=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Metric.objects.create(run=run, name="a", value=2, uid="u1")


def test_only_one_active_run():
    Run.objects.create(name="a", state=Run.STARTED)
    Run.objects.create(name="done", state=Run.FINISHED)
    with pytest.raises(IntegrityError, match="run_one_active"), transaction.atomic():
        Run.objects.create(name="b", state=Run.INITIALIZED)


def test_pod_metrics_outlive_the_pod():
    pod = Pod.objects.create(name="worker-0", phase="Running")
    Metric.objects.create(pod_name=pod.name, name="cpu_cores", value=0.5)
    pod.delete()
    assert Metric.objects.filter(pod_name="worker-0").count() == 1


@pytest.mark.django_db(transaction=True)
def test_rollup_foreign_key_rejects_points_of_a_missing_run():
    """Metric.run has no database foreign key (ingestion speed); the rollup trigger's insert
    into MetricRollup has one, so a batch for a run that no longer exists fails whole."""
    from mlbench_master.api import ingest
    from mlbench_master.runs import metrics_store

    rows, _ = ingest.parse_points([{"run_id": 424242, "name": "a", "value": 1}])
    with pytest.raises(IntegrityError):
        metrics_store.store(rows)
    assert Metric.objects.count() == 0


def test_rollups_follow_inserts_and_skip_duplicates():
    from mlbench_master.api import ingest
    from mlbench_master.api.models import MetricRollup
    from mlbench_master.runs import metrics_store

    run = Run.objects.create(name="r", state=Run.FINISHED)
    points = [{"run_id": run.pk, "name": "a", "value": v, "uid": f"u{v}",
               "date": f"2024-01-01T00:00:0{v}.5Z"} for v in range(4)]  # fmt: skip
    for _ in range(2):  # the retry adds nothing
        metrics_store.store(ingest.parse_points(points)[0])
    rollups = list(MetricRollup.objects.order_by("second").values_list("count", "total"))
    assert rollups == [(1, 0.0), (1, 1.0), (1, 2.0), (1, 3.0)]
    run.delete()
    assert MetricRollup.objects.count() == 0 and Metric.objects.count() == 0
