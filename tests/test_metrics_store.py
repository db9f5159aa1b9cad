"""The one writer of metric points (mlbench_master/runs/metrics_store.py) and its two callers:
the API's ingest (tests/api/test_metrics_post.py, test_sqlite.py) and the collector."""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from mlbench_master.cluster.base import PodSample
from mlbench_master.runs import metrics_store
from mlbench_master.runs.metrics_store import Point, store

pytestmark = pytest.mark.django_db


def _inserts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("INSERT")]


def test_a_batch_is_one_statement_and_a_stored_uid_is_skipped():
    run = Run.objects.create(name="r", state=Run.STARTED)
    now = timezone.now()
    rows = [Point(run.pk, None, "loss", float(i), now, False, {}, f"u{i}") for i in range(10_000)]
    with CaptureQueriesContext(connection) as queries:
        store(rows)
    assert len(_inserts(queries)) == 1
    store([*rows[:10], Point(run.pk, None, "loss", 0.5, now, True, {"k": 1}, "new")])
    assert Metric.objects.count() == 10_001
    assert Metric.objects.get(uid="new").metadata == {"k": 1}


def test_a_retried_batch_inside_a_transaction_leaves_it_usable_and_stores_only_the_new():
    """The plain INSERT meets the stored uid and fails; its savepoint is rolled back and the
    batch goes again with ON CONFLICT DO NOTHING; the caller's transaction goes on."""
    from django.db import transaction

    run = Run.objects.create(name="r", state=Run.STARTED)
    now = timezone.now()
    first = [Point(run.pk, None, "loss", float(i), now, False, {}, f"u{i}") for i in range(5)]
    store(first)
    again = [*first[3:], Point(run.pk, None, "loss", 9.0, now, False, {}, "u9")] * 2
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        store(again)
        Run.objects.filter(pk=run.pk).update(name="still usable")
    inserts = _inserts(queries)
    assert len(inserts) == 2 and "ON CONFLICT" in inserts[1] and "ON CONFLICT" not in inserts[0]
    assert sorted(Metric.objects.values_list("uid", flat=True)) == [
        f"u{i}" for i in (0, 1, 2, 3, 4, 9)
    ]
    assert Run.objects.get(pk=run.pk).name == "still usable"


def test_metadata_beyond_what_orjson_writes_is_stored_exactly():
    run = Run.objects.create(name="r", state=Run.STARTED)
    big = 2**70 + 1  # beyond 64 bits: orjson refuses it, the standard library writes it
    store([Point(run.pk, None, "loss", 1.0, timezone.now(), False, {"big": big}, "b")])
    assert Metric.objects.get(uid="b").metadata == {"big": big}


def test_a_date_at_an_offset_of_seconds_is_stored_at_its_instant():
    """orjson rounds an offset to whole minutes; the store hands dates over in UTC."""
    import datetime as dt

    run = Run.objects.create(name="r", state=Run.STARTED)
    odd = dt.timezone(dt.timedelta(hours=5, minutes=30, seconds=15))
    when = dt.datetime(2026, 5, 1, 12, 0, 0, 250, tzinfo=odd)
    store([Point(run.pk, None, "loss", 1.0, when, False, {}, "o")])
    assert Metric.objects.get(uid="o").date == when


def test_every_value_is_stored_to_the_bit():
    """The batch travels as jsonb, whose numbers have no negative zero: -0.0 must survive,
    and so must the extremes of float64."""
    run = Run.objects.create(name="r", state=Run.STARTED)
    values = [-0.0, 0.0, 0, 5e-324, -1.7976931348623157e308, 0.1, 1 / 3, -2.5e-300]
    now = timezone.now()
    store(
        [Point(run.pk, None, "v", float(v), now, False, {}, f"v{i}") for i, v in enumerate(values)]
    )
    stored = {m.uid: m.value for m in Metric.objects.filter(run=run)}
    assert [stored[f"v{i}"].hex() for i in range(len(values))] == [float(v).hex() for v in values]


def test_a_point_without_metadata_is_refused_whole():
    """On PostgreSQL the column holds a JSON value, never NULL: a caller that hands None
    over (the API's ingest turns a missing one into {}) gets the database's refusal, and
    nothing of its batch is stored."""
    from django.db import IntegrityError

    run = Run.objects.create(name="r", state=Run.STARTED)
    now = timezone.now()
    good = Point(run.pk, None, "v", 1.0, now, False, {}, "good")
    with pytest.raises(IntegrityError):
        store([good, good._replace(metadata=None, uid="none")])
    assert not Metric.objects.filter(run=run).exists()


def test_points_without_a_uid_are_all_stored_and_nothing_is_no_statement():
    point = Point(None, "w-0", "cpu_cores", 0.5, timezone.now(), False, {}, None)
    store([point, point])
    assert Metric.objects.filter(pod_name="w-0", uid=None).count() == 2
    with CaptureQueriesContext(connection) as queries:
        store([])
    assert not queries.captured_queries


def test_the_collector_stores_the_drivers_readings_through_it(monkeypatch):
    from mlbench_master.runs.collector import collect_pod_metrics

    now = timezone.now()
    samples = [
        PodSample("w-0", "cpu_cores", 0.5, now),
        PodSample("w-0", "net_rx_bytes", math.nan, now, True),  # no number: not stored
        PodSample("w-0", "memory_bytes", 1e9, now, False, {"run_id": 3, "rank": 0}),
    ]

    class Driver:
        def pods(self) -> list:
            return []

        def samples(self, spec: object) -> list[PodSample]:
            return samples

    batches = []

    def spy(rows: list[Point]) -> None:
        batches.append(rows)
        real(rows)

    real = metrics_store.store
    monkeypatch.setattr("mlbench_master.cluster.drivers.get_driver", lambda: Driver())
    monkeypatch.setattr(metrics_store, "store", spy)
    assert collect_pod_metrics() == 2
    assert [len(b) for b in batches] == [2]
    stored = {m.name: m for m in Metric.objects.all()}
    assert sorted(stored) == ["cpu_cores", "memory_bytes"]
    memory = stored["memory_bytes"]
    assert memory.run_id is None and memory.pod_name == "w-0" and memory.uid is None
    assert memory.value == 1e9 and memory.metadata == {"run_id": 3, "rank": 0}
    assert memory.date == now and not memory.cumulative
