"""Every read of GET /api/metrics/<run>/ returns each point's benchmark-clock second as
`elapsed` (the `elapsed` stored in its metadata), summarized reads included: a bucket's is
its last point's, the point it is dated at (mlbench_master/runs/metric_reads.py)."""

import datetime as dt
import json

import pytest

from mlbench_master.api.models import Metric

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=dt.UTC)
# The clock is NOT the date minus a start: start-up, a resumed run's earlier part and
# late-dated points (the evaluator's grades) all make dates a poor guide to it.
STARTUP = 40.0


def clock(i: int) -> float:
    return round(1000.0 + 0.7 * i, 3)


def _store(run, name, n, step=0.5, meta=lambda i: {"elapsed": clock(i), "step": i}):
    Metric.objects.bulk_create(
        Metric(run=run, name=name, value=float(i), metadata=meta(i),
               date=T0 + dt.timedelta(seconds=STARTUP + i * step))
        for i in range(n)
    )  # fmt: skip


def _expected_buckets(n, summarize, step=0.5):
    """(average, last point's clock) of each bucket, by the documented bucket rule."""
    seconds = [int((T0 + dt.timedelta(seconds=STARTUP + i * step)).timestamp()) for i in range(n)]
    if n <= summarize:
        return [(float(i), clock(i)) for i in range(n)]
    width = (seconds[-1] - seconds[0] + summarize) // summarize
    buckets: dict[int, list[int]] = {}
    for i, sec in enumerate(seconds):
        buckets.setdefault((sec - seconds[0]) // width, []).append(i)
    return [(sum(b) / len(b), clock(b[-1])) for _, b in sorted(buckets.items())]


@pytest.mark.parametrize("n, summarize", [(400, 7), (120, 50), (30, 30), (9, 40)])
@pytest.mark.parametrize("query", ["", "&since=1970-01-01T00:00:00Z"])  # rollups | points
def test_summarized_points_carry_their_benchmark_time(api, run, n, summarize, query):
    _store(run, "val_accuracy", n)
    url = f"/api/metrics/{run.pk}/?metric_type=run&summarize={summarize}{query}"
    got = api.get(url).json()["val_accuracy"]
    expected = _expected_buckets(n, summarize)
    assert [(p["value"], p["elapsed"]) for p in got] == [
        (pytest.approx(v), pytest.approx(c)) for v, c in expected
    ]


def test_last_n_and_plain_reads_carry_it_too(api, run):
    _store(run, "train_loss", 50)
    base = f"/api/metrics/{run.pk}/?metric_type=run"
    plain = api.get(base).json()["train_loss"]
    assert [p["elapsed"] for p in plain] == [clock(i) for i in range(50)]
    last = api.get(base + "&last_n=4").json()["train_loss"]
    assert [p["elapsed"] for p in last] == [clock(i) for i in range(46, 50)]
    both = api.get(base + "&last_n=10&summarize=5").json()["train_loss"]
    assert [p["elapsed"] for p in both] == [clock(i) for i in (41, 43, 45, 47, 49)]
    detailed = api.get(base + "&last_n=1&details=1").json()["train_loss"]
    assert detailed[0]["elapsed"] == detailed[0]["metadata"]["elapsed"] == clock(49)


def test_a_point_without_a_clock_has_no_elapsed(api, run):
    odd = {0: {}, 1: {"elapsed": "soon"}, 2: {"elapsed": True}, 3: {"elapsed": 7}}
    _store(run, "time_to_target", 4, meta=lambda i: odd[i])
    for query in ("", "&summarize=10", "&summarize=10&since=1970-01-01T00:00:00Z"):
        got = api.get(f"/api/metrics/{run.pk}/?metric_type=run{query}").json()
        assert [p.get("elapsed") for p in got["time_to_target"]] == [None, None, None, 7.0]


def _point(run, name, value, date, elapsed, step):
    from mlbench_master.runs.metrics_store import Point

    return Point(run_id=run.pk, pod_name=None, name=name, value=value, date=date,
                 cumulative=False, metadata={"elapsed": elapsed, "step": step}, uid=None)  # fmt: skip


def test_a_buckets_clock_is_its_last_point_whatever_order_the_batches_came_in(api, run):
    """The rollups keep each second's last point (newest date, highest id among equal
    dates) as batches arrive in any order, and a replaced point is recounted: the summary
    read from them places every bucket where the points themselves do."""
    from mlbench_master.runs.metrics_store import Replaced, store

    base = T0 + dt.timedelta(seconds=STARTUP)
    at = [
        base + dt.timedelta(seconds=s, milliseconds=ms) for s in range(40) for ms in (0, 300, 600)
    ]
    late, early = at[60:], at[:60]  # the later seconds are posted first
    store([_point(run, "m", 1.0, d, 500.0 + i, i) for i, d in enumerate(late, start=60)])
    store([_point(run, "m", 2.0, d, 100.0 + i, i) for i, d in enumerate(early)])
    # Equal dates at the end of a second, in two batches: the higher id (this one) is last.
    store([_point(run, "m", 3.0, at[32], 777.0, 32)])
    # A point of a retried evaluation replaces one at the end of a second.
    store([_point(run, "m", 4.0, at[59], 888.0, 59)],
          replaces=Replaced(run.pk, ("m",), "step", 59))  # fmt: skip
    urls = [f"/api/metrics/{run.pk}/?metric_type=run&summarize={n}" for n in (7, 13, 40)]
    for url in urls:
        rollup = api.get(url).json()["m"]
        points = api.get(url + "&since=1970-01-01T00:00:00Z").json()["m"]
        assert [(p["date"], p["elapsed"]) for p in rollup] == [
            (p["date"], p["elapsed"]) for p in points
        ], url
        assert [p["value"] for p in rollup] == [pytest.approx(p["value"]) for p in points]
    per_second = api.get(urls[2]).json()["m"]  # 40 seconds in 40 buckets: one each
    assert [p["elapsed"] for p in per_second][10] == 777.0  # equal dates: the higher id
    assert [p["elapsed"] for p in per_second][19] == 888.0  # the replacing point
    assert [p["elapsed"] for p in per_second][39] == 500.0 + 119  # posted first, last anyway


def test_the_summary_made_by_postgresql_equals_the_one_made_in_python(api, run):
    """GET answers a run's summary with JSON that PostgreSQL builds (metric_reads.
    summarized_json); it must say what `series` says for the same query, point for point:
    long series as buckets, short ones whole, points without a clock without `elapsed`,
    values that are whole numbers, the metric filter, and a run with nothing to show."""
    from django.db import connection

    from mlbench_master.runs.metric_reads import SeriesQuery, series, summarized_json

    if connection.vendor != "postgresql":
        pytest.skip("the rollups exist on PostgreSQL only")
    _store(run, "long", 400, step=0.37)
    _store(run, "short", 6)
    _store(run, "clockless", 30, meta=lambda i: {} if i % 3 else {"elapsed": i / 3})
    for names in (None, ["short", "clockless"], ["nothing"]):
        query = SeriesQuery("run", run.pk, names=names, summarize=12)
        made = summarized_json(query)
        assert made is not None
        assert json.loads(made) == series(query).get(str(run.pk), {}), names
    body = api.get(f"/api/metrics/{run.pk}/?metric_type=run&summarize=12").json()
    assert len(body["long"]) <= 12 and len(body["short"]) == 6
    whole = api.get(f"/api/metrics/{run.pk}/?metric_type=run&summarize=40").json()
    assert [p.get("elapsed") for p in whole["clockless"]][:4] == [0.0, None, None, 1.0]
    assert [p["value"] for p in whole["short"]] == [0, 1, 2, 3, 4, 5]
    # Not the rollups' question: details, since, last_n are answered by `series`.
    assert summarized_json(SeriesQuery("run", run.pk, summarize=12, last_n=3)) is None
