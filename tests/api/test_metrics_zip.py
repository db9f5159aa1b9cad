"""GET /api/metrics/<id>/?format=zip: a streamed archive of a run's or a pod's data."""

import datetime as dt
import io
import json
import zipfile

import pytest

from mlbench_master.api.models import Metric
from mlbench_master.runs.logs import append_logs

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def _zip(response):
    assert response.status_code == 200, response
    assert response["Content-Type"] == "application/zip"
    assert response.streaming
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_run_zip_contents(api, make_run):
    run = make_run(name="zip me", manifest={"git_revision": "abc"}, summary={"epochs": 2})
    Metric.objects.bulk_create(
        Metric(run=run, name=name, value=i / 2, date=T0 + dt.timedelta(seconds=i),
               metadata={"step": i}, cumulative=False)
        for name in ("train/loss", "val_accuracy") for i in range(3000)
    )  # fmt: skip
    Metric.objects.create(
        pod_name="w-0", name="cpu_cores", value=1.5, date=run.created_at,
        metadata={"run_id": run.pk},
    )  # fmt: skip
    Metric.objects.create(pod_name="w-0", name="cpu_cores", value=9, date=run.created_at)
    append_logs(
        run, [(0, "stdout", "epoch 1\n"), (1, "stderr", "warn\n"), (0, "stdout", "epoch 2\n")]
    )

    z = _zip(api.get(f"/api/metrics/{run.pk}/?metric_type=run&format=zip"))
    assert z.testzip() is None
    names = set(z.namelist())
    assert names == {
        "run.json",
        "metrics/train_loss.json",
        "metrics/val_accuracy.json",
        "pods/w-0/cpu_cores.json",
        "logs/rank-0.stdout.log",
        "logs/rank-1.stderr.log",
    }
    info = json.loads(z.read("run.json"))
    assert info["run"]["name"] == "zip me"
    assert info["run"]["manifest"] == {"git_revision": "abc"}
    assert info["run"]["summary"] == {"epochs": 2}
    loss = json.loads(z.read("metrics/train_loss.json"))
    assert len(loss) == 3000
    assert loss[0] == {"date": "2024-05-01T12:00:00.000000Z", "value": 0.0,
                       "cumulative": False, "metadata": {"step": 0}}  # fmt: skip
    assert [p["value"] for p in loss[:3]] == [0.0, 0.5, 1.0]
    assert [p["value"] for p in json.loads(z.read("pods/w-0/cpu_cores.json"))] == [1.5]
    assert z.read("logs/rank-0.stdout.log") == b"epoch 1\nepoch 2\n"


def test_run_zip_summarized_and_since(api, make_run):
    run = make_run()
    Metric.objects.bulk_create(
        Metric(run=run, name="loss", value=i, date=T0 + dt.timedelta(seconds=i)) for i in range(100)
    )
    since = (T0 + dt.timedelta(seconds=49.5)).isoformat()
    r = api.get(f"/api/metrics/{run.pk}/", {"metric_type": "run", "format": "zip",
                                             "summarize": 5, "since": since})  # fmt: skip
    z = _zip(r)
    loss = json.loads(z.read("metrics/loss.json"))
    assert [p["value"] for p in loss] == [54.5, 64.5, 74.5, 84.5, 94.5]
    assert json.loads(z.read("run.json"))["query"]["summarize"] == 5


def test_pod_zip(api):
    Metric.objects.create(pod_name="w-1", name="memory_bytes", value=1e9, date=T0)
    z = _zip(api.get("/api/metrics/w-1/?format=zip"))
    assert z.namelist() == ["metrics/memory_bytes.json"]
    assert json.loads(z.read("metrics/memory_bytes.json"))[0]["value"] == 1e9


def test_zip_needs_auth(anon, make_run):
    run = make_run()
    assert anon.get(f"/api/metrics/{run.pk}/?metric_type=run&format=zip").status_code == 401
