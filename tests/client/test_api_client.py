"""`ApiClient` against a live master: every method of the seed client, futures, errors."""

import datetime as dt
import io
import zipfile
from concurrent.futures import Future

import pytest

from mlbench_worker.api import ApiClient, ApiError
from tests.e2e.live import script

pytestmark = pytest.mark.mpi


@pytest.fixture
def client(master):
    with ApiClient(url=master.url, token=master.token, in_cluster=False) as c:
        yield c


def test_every_seed_method_round_trips(master, client):
    created = client.create_run(
        "client-run",
        2,
        num_cpus=1.0,
        custom_image_command=script("sleeper.py") + " 1",
        run_all_nodes=True,
    )
    assert isinstance(created, Future)
    response = created.result()
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]

    assert client.get_run(run_id).result().json()["name"] == "client-run"
    assert run_id in [r["id"] for r in client.get_runs().result().json()]
    master.wait_state(run_id, ("FINISHED",), timeout=60)

    posted = client.post_metric(run_id, "val_accuracy", 0.5, metadata={"epoch": 1.0}).result()
    assert posted.status_code == 201, posted.text
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    client.post_metric(run_id, "val_accuracy", 0.75, date=later).result()

    metrics = client.get_run_metrics(run_id).result().json()
    assert [p["value"] for p in metrics["val_accuracy"]][-2:] == [0.5, 0.75]
    last = client.get_run_metrics(run_id, metric_filter="val_accuracy", last_n=1).result()
    assert [p["value"] for p in last.json()["val_accuracy"]] == [0.75]
    since = client.get_run_metrics(run_id, since=later - dt.timedelta(milliseconds=1)).result()
    assert [p["value"] for p in since.json()["val_accuracy"]] == [0.75]
    assert client.get_run_metrics(run_id, summarize=1).result().status_code == 200

    archive = client.download_run_metrics(run_id).result()
    assert archive.status_code == 200
    assert zipfile.ZipFile(io.BytesIO(archive.content)).namelist()

    pods = client.get_worker_pods().result().json()
    assert {p["name"] for p in pods} == {"local-worker-0", "local-worker-1"}
    assert client.get_pod_metrics("local-worker-0").result().status_code == 200
    assert client.get_all_metrics().result().status_code == 200

    assert client.delete_run(run_id).result().status_code == 204
    assert client.get_run(run_id).result().status_code == 404


def test_writes_without_a_token_are_refused(master):
    with ApiClient(url=master.url, token="", in_cluster=False) as anonymous:
        response = anonymous.create_run("nope", 1).result()
    assert response.status_code == 401  # no token sent: not authenticated


def test_bad_input_is_a_400_naming_the_field(client):
    response = client.create_run("too-big", 3).result()
    assert response.status_code == 400
    assert "num_workers" in response.text and "2 local worker slots" in response.text


def test_url_without_scheme_and_no_cluster_config(master, tmp_path, monkeypatch):
    host = master.url.removeprefix("http://")
    with ApiClient(url=host, token=master.token) as c:
        assert c.endpoint == master.url
        assert c.get_runs().result().status_code == 200
    monkeypatch.delenv("MLBENCH_URL", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ApiError, match="pass url="):
        ApiClient(in_cluster=False)
    with pytest.raises(ApiError, match="pass url="):
        ApiClient(in_cluster=True)
    monkeypatch.setenv("MLBENCH_URL", master.url)
    with ApiClient(token=master.token) as from_env:
        assert from_env.get_runs().result().status_code == 200
