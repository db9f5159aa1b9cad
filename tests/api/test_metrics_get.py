"""GET /api/metrics/ and /api/metrics/<pod_name_or_run_id>/ with every parameter."""

import datetime as dt

import pytest
from django.db.models import JSONField, Value

from mlbench_master.api.models import Metric

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2018, 8, 3, 9, 21, 29, 347960, tzinfo=dt.UTC)


def _points(run=None, pod=None, name="loss", values=(), start=T0, step=1.0):
    Metric.objects.bulk_create(
        Metric(
            run=run,
            pod_name=pod,
            name=name,
            value=v,
            date=start + dt.timedelta(seconds=i * step),
        )
        for i, v in enumerate(values)
    )


def test_seed_example_all_pods(api, run):
    _points(pod="quiet-mink-mlbench-worker-0", name="container_cpu_usage_seconds_total",
            values=[0.188236813, 0.215950298])  # fmt: skip
    _points(pod="quiet-mink-mlbench-worker-1", name="container_cpu_user_seconds_total",
            values=[0.1, 0.1])  # fmt: skip
    _points(run=run, values=[1.0])  # run metrics are not pod metrics
    r = api.get("/api/metrics", HTTP_ACCEPT="application/json, text/javascript")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"quiet-mink-mlbench-worker-0", "quiet-mink-mlbench-worker-1"}
    series = body["quiet-mink-mlbench-worker-0"]["container_cpu_usage_seconds_total"]
    assert series == [
        {"date": "2018-08-03T09:21:29.347960Z", "value": 0.188236813},
        {"date": "2018-08-03T09:21:30.347960Z", "value": 0.215950298},
    ]


def test_seed_example_one_pod(api):
    _points(pod="quiet-mink-mlbench-worker-1", name="container_cpu_usage_seconds_total",
            values=[0.149286015, 0.15325329])  # fmt: skip
    _points(pod="quiet-mink-mlbench-worker-1", name="container_cpu_user_seconds_total",
            values=[0.1, 0.1])  # fmt: skip
    _points(pod="other", values=[5])
    body = api.get("/api/metrics/quiet-mink-mlbench-worker-1/").json()
    assert set(body) == {"container_cpu_usage_seconds_total", "container_cpu_user_seconds_total"}
    assert [p["value"] for p in body["container_cpu_usage_seconds_total"]] == [
        0.149286015,
        0.15325329,
    ]
    assert api.get("/api/metrics/no-such-pod/").json() == {}


def test_run_metrics_and_all_runs(api, run, make_run):
    other = make_run()
    _points(run=run, name="loss", values=[3, 2, 1])
    _points(run=run, name="acc", values=[0.1, 0.2])
    _points(run=other, name="loss", values=[9])
    body = api.get(f"/api/metrics/{run.pk}/?metric_type=run").json()
    assert [p["value"] for p in body["loss"]] == [3, 2, 1]
    assert [p["value"] for p in body["acc"]] == [0.1, 0.2]
    every = api.get("/api/metrics/?metric_type=run").json()
    assert set(every) == {str(run.pk), str(other.pk)}


def test_run_key_must_be_a_run(api):
    r = api.get("/api/metrics/abc/?metric_type=run")
    assert r.status_code == 400 and "pod_name_or_run_id" in r.json()["errors"]
    assert api.get("/api/metrics/999999/?metric_type=run").status_code == 404


@pytest.mark.parametrize(
    "since, expected",
    [
        ("2018-08-03T09:21:31Z", [2, 3, 4]),
        ("2018-08-03T09:21:31.347960Z", [3, 4]),  # strictly newer
        ("2018-08-03T09:21:31.347959+00:00", [2, 3, 4]),
        ("2018-08-03T11:21:31.5+02:00", [3, 4]),
        ("2018-08-03T09:21:31", [2, 3, 4]),  # naive: UTC
        ("2018-08-03 09:21:31.347960 00:00", [3, 4]),  # '+' decoded to a space
        ("1970-01-01T00:00:00.000000Z", [0, 1, 2, 3, 4]),
    ],
)
def test_since(api, run, since, expected):
    _points(run=run, values=[0, 1, 2, 3, 4])
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "since": since})
    assert r.status_code == 200
    assert [p["value"] for p in r.json()["loss"]] == expected


@pytest.mark.parametrize("since", ["yesterday", "2018-13-01T00:00:00Z", "2018-08-03T25:00", "1"])
def test_invalid_since(api, run, since):
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "since": since})
    assert r.status_code == 400
    assert "since" in r.json()["errors"] and "ISO 8601" in r.json()["detail"]


def _expected_summary(values, summarize, seconds):
    """The documented rule: a series of more than N points is cut into buckets of
    ceil(span / N) whole seconds from its first second; each gives its average."""
    if len(values) <= summarize:
        return [(v,) for v in values]
    s0, s1 = seconds[0], seconds[-1]
    width = (s1 - s0 + summarize) // summarize
    buckets: dict[int, list[float]] = {}
    for sec, v in zip(seconds, values, strict=True):
        buckets.setdefault((sec - s0) // width, []).append(v)
    return [(sum(b) / len(b),) for _, b in sorted(buckets.items())]


@pytest.mark.parametrize(
    "n, summarize, step",
    [(10, 3, 1.0), (1000, 7, 1.0), (5, 10, 1.0), (12, 12, 1.0), (100, 1, 1.0), (50, 4, 0.3),
     (200, 10, 7.5)],
)  # fmt: skip
def test_summarize_counts_and_averages(api, run, n, summarize, step):
    values = [float(i * i % 17) for i in range(n)]
    _points(run=run, values=values, step=step)
    _points(run=run, name="other", values=[1.0] * 3)
    seconds = [int((T0 + dt.timedelta(seconds=i * step)).timestamp()) for i in range(n)]
    expected = _expected_summary(values, summarize, seconds)
    url = f"/api/metrics/{run.pk}/?metric_type=run&summarize={summarize}"
    # per-second sums (PostgreSQL rollups) and the points themselves (since=...) agree
    for query in ("", "&since=1970-01-01T00:00:00Z"):
        body = api.get(url + query).json()
        got = body["loss"]
        assert len(got) <= summarize
        assert [(p["value"],) for p in got] == [pytest.approx(e) for e in expected]
        last = T0 + dt.timedelta(seconds=(n - 1) * step)
        assert got[-1]["date"] == last.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert len(body["other"]) == min(3, summarize) or summarize < 3


def test_summarize_pod_metrics(api):
    _points(pod="w-0", name="cpu_cores", values=[float(i) for i in range(100)])
    body = api.get("/api/metrics/w-0/?summarize=10").json()
    assert [p["value"] for p in body["cpu_cores"]] == [4.5 + 10 * k for k in range(10)]
    every = api.get("/api/metrics/?summarize=10").json()
    assert every["w-0"] == body


def test_summarize_with_since_last_n_and_filter(api, run):
    _points(run=run, values=list(range(100)))
    _points(run=run, name="acc", values=list(range(10)))
    r = api.get(
        f"/api/metrics/{run.pk}/",
        {"metric_type": "run", "last_n": 10, "summarize": 5, "metric_filter": "loss,nothing"},
    )
    body = r.json()
    assert list(body) == ["loss"]
    assert [p["value"] for p in body["loss"]] == [90.5, 92.5, 94.5, 96.5, 98.5]
    body = api.get(f"/api/metrics/{run.pk}/?metric_type=run&last_n=3").json()
    assert [p["value"] for p in body["loss"]] == [97, 98, 99]
    assert [p["value"] for p in body["acc"]] == [7, 8, 9]


@pytest.mark.parametrize(
    "query, field",
    [
        ("summarize=0", "summarize"),
        ("summarize=abc", "summarize"),
        ("summarize=-5", "summarize"),
        ("last_n=x", "last_n"),
        ("metric_type=node", "metric_type"),
        ("format=csv", "format"),
        ("metric_filter=,,", "metric_filter"),
    ],
)
def test_bad_parameters(api, run, query, field):
    r = api.get(
        f"/api/metrics/{run.pk}/?metric_type=run&{query}".replace(
            "metric_type=run&metric_type", "metric_type"
        )
    )
    assert r.status_code == 400, r.json()
    assert field in r.json()["errors"]


def test_last_n_with_since_for_a_pod_and_in_a_zip(api, run):
    import io
    import json
    import zipfile

    _points(pod="w-0", name="cpu_cores", values=[float(i) for i in range(20)])
    since = (T0 + dt.timedelta(seconds=14.5)).isoformat()
    body = api.get("/api/metrics/w-0/", {"last_n": 3, "since": since}).json()
    assert [p["value"] for p in body["cpu_cores"]] == [17, 18, 19]
    body = api.get("/api/metrics/w-0/", {"last_n": 10, "since": since}).json()
    assert [p["value"] for p in body["cpu_cores"]] == [15, 16, 17, 18, 19]
    _points(run=run, name="loss", values=[float(i) for i in range(20)])
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "format": "zip", "last_n": 2})
    z = zipfile.ZipFile(io.BytesIO(b"".join(r.streaming_content)))
    assert [p["value"] for p in json.loads(z.read("metrics/loss.json"))] == [18.0, 19.0]


def _detailed_points(run=None, pod=None, name="busbw_mbps"):
    """Points as the backend benchmark posts them: the cell in the metadata."""
    Metric.objects.bulk_create(
        [
            Metric(run=run, pod_name=pod, name=name, value=10.5, date=T0,
                   metadata={"op": "allreduce", "backend": "gloo", "size": 1024, "best": 12.0}),
            Metric(run=run, pod_name=pod, name=name, value=20.25, date=T0 + dt.timedelta(seconds=1),
                   cumulative=True, metadata={}),
            Metric(run=run, pod_name=pod, name=name, value=30.0, date=T0 + dt.timedelta(seconds=2),
                   metadata=Value(None, JSONField())),  # JSON null
        ]
    )  # fmt: skip


DETAILED = [
    {"date": "2018-08-03T09:21:29.347960Z", "value": 10.5, "cumulative": False,
     "metadata": {"op": "allreduce", "backend": "gloo", "size": 1024, "best": 12.0}},
    {"date": "2018-08-03T09:21:30.347960Z", "value": 20.25, "cumulative": True, "metadata": {}},
    {"date": "2018-08-03T09:21:31.347960Z", "value": 30.0, "cumulative": False, "metadata": None},
]  # fmt: skip


@pytest.mark.parametrize("flag", ["1", "true", "yes", "True", "YES"])
def test_details_adds_cumulative_and_metadata(api, run, flag):
    _detailed_points(run=run)
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "details": flag})
    assert r.status_code == 200, r.json()
    assert r.json() == {"busbw_mbps": DETAILED}


def test_details_with_last_n_since_and_filter(api, run):
    _detailed_points(run=run)
    _detailed_points(run=run, name="latency_us")
    url = f"/api/metrics/{run.pk}/"
    body = api.get(url, {"metric_type": "run", "details": 1, "last_n": 2}).json()
    assert body == {"busbw_mbps": DETAILED[1:], "latency_us": DETAILED[1:]}
    query = {"metric_type": "run", "details": 1, "since": "2018-08-03T09:21:30Z",
             "metric_filter": "latency_us"}  # fmt: skip
    assert api.get(url, query).json() == {"latency_us": DETAILED[1:]}


def test_details_for_pods_and_the_list_endpoint(api, run):
    _detailed_points(pod="w-0", name="cpu_cores")
    _detailed_points(run=run)
    assert api.get("/api/metrics/w-0/?details=1").json() == {"cpu_cores": DETAILED}
    assert api.get("/api/metrics/?details=1").json() == {"w-0": {"cpu_cores": DETAILED}}
    every = api.get("/api/metrics/?metric_type=run&details=yes").json()
    assert every == {str(run.pk): {"busbw_mbps": DETAILED}}


@pytest.mark.parametrize("flag", [None, "", "0", "false", "no", "No"])
def test_without_details_the_answer_is_as_before(api, run, flag):
    _detailed_points(run=run)
    _detailed_points(pod="w-0", name="cpu_cores")
    query = {"metric_type": "run"} if flag is None else {"metric_type": "run", "details": flag}
    r = api.get(f"/api/metrics/{run.pk}/", query)
    plain = [{"date": p["date"], "value": p["value"]} for p in DETAILED]
    assert r.json() == {"busbw_mbps": plain}
    # byte for byte: the same JSON text as a request that does not name the parameter
    assert r.content == api.get(f"/api/metrics/{run.pk}/?metric_type=run").content
    assert r.content == (
        b'{"busbw_mbps":[{"date":"2018-08-03T09:21:29.347960Z","value":10.5},'
        b'{"date":"2018-08-03T09:21:30.347960Z","value":20.25},'
        b'{"date":"2018-08-03T09:21:31.347960Z","value":30.0}]}'
    )
    listed = api.get("/api/metrics/", {} if flag is None else {"details": flag}).json()
    assert listed == {"w-0": {"cpu_cores": plain}}


@pytest.mark.parametrize("flag", ["2", "on", "y", "maybe", "truee", "-1"])
def test_a_bad_details_value_is_400(api, run, flag):
    for url in (f"/api/metrics/{run.pk}/?metric_type=run", "/api/metrics/?metric_type=run"):
        r = api.get(url, {"details": flag})
        assert r.status_code == 400, r.json()
        assert list(r.json()["errors"]) == ["details"]
        assert "1, true, yes, 0, false, no" in r.json()["detail"]


def test_details_with_summarize_is_400(api, run):
    _detailed_points(run=run)
    for url in (f"/api/metrics/{run.pk}/", "/api/metrics/"):
        r = api.get(url, {"metric_type": "run", "details": 1, "summarize": 2})
        assert r.status_code == 400, r.json()
        assert list(r.json()["errors"]) == ["details"]
        assert "summarize" in r.json()["detail"]
    # details off with summarize is the plain summary; a bad summarize is named first
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "details": 0, "summarize": 2})
    assert r.status_code == 200 and len(r.json()["busbw_mbps"]) == 2
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "details": 1, "summarize": 0})
    assert r.status_code == 400 and "summarize" in r.json()["errors"]


def test_details_in_a_zip_changes_nothing(api, run):
    import io
    import json
    import zipfile

    _detailed_points(run=run)
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "format": "zip", "details": 1})
    assert r.status_code == 200
    z = zipfile.ZipFile(io.BytesIO(b"".join(r.streaming_content)))
    assert json.loads(z.read("metrics/busbw_mbps.json")) == DETAILED
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "format": "zip", "details": 2})
    assert r.status_code == 400 and "details" in r.json()["errors"]
