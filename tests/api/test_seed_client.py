# Over 400 lines: the original client's wire double (SeedWire) and a test for each of its 10 calls.
"""The original platform's client against the embedded master, call by call, on the wire.

Scripts written for the original `ApiClient` (mlbench-core 3.x) must work unchanged. That
client is not installed here (it drags in its own pinned stack); `SeedWire` below sends each
of its ten calls the way its documentation and wire format describe them: credentials only
in the URL (so `requests` sends HTTP Basic), form-encoded bodies whose values are strings,
paths without a trailing slash, dates as `str()` of a naive UTC datetime. Each test reads
the answer the way such a script does: a status code and `.json()`.

The master is the real embedded one (`mlbench up`: waitress, RQ, Redis, PostgreSQL), so a
run created here really starts; the suite cancels it by deleting it.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.live import LiveMaster, start_master

SLEEPER = Path(__file__).resolve().parents[1] / "e2e" / "scripts" / "sleeper.py"
ROOT = Path(__file__).resolve().parents[2]
ORIGINAL_CLIENT = Path(__file__).with_name("scripts") / "original_client.py"
SEED_PYTHON = Path(os.environ.get("MLBENCH_SEED_PYTHON") or ROOT / ".venv-seed" / "bin" / "python")
RESNET20 = "mlbench/pytorch-cifar10-resnet20-all-reduce:latest"
EPSILON = "mlbench/pytorch-epsilon-logistic-regression-all-reduce:latest"
POD_NAMES = ["local-worker-0", "local-worker-1"]  # the local driver's slots, by name


class SeedWire:
    """The original client's ten calls as it puts them on the wire (no code of it here)."""

    def __init__(self, url: str) -> None:
        self.endpoint = f"http://{url}/api/"

    # reads: GET without a body, parameters as strings
    def get_runs(self) -> requests.Response:
        return requests.get(self.endpoint + "runs/", timeout=30)

    def get_run(self, run_id: Any) -> requests.Response:
        return requests.get(f"{self.endpoint}runs/{run_id}", timeout=30)

    def get_worker_pods(self) -> requests.Response:
        return requests.get(self.endpoint + "pods/", timeout=30)

    def get_all_metrics(self) -> requests.Response:
        return requests.get(self.endpoint + "metrics/", timeout=30)

    def _metrics(self, pk: Any, metric_type: str, **options: Any) -> requests.Response:
        query = {"metric_type": metric_type}
        query.update({k: str(v) for k, v in options.items() if v is not None})
        return requests.get(f"{self.endpoint}metrics/{pk}", params=query, timeout=30)

    def get_run_metrics(
        self, run_id: Any, since=None, summarize=None, metric_filter=None, last_n=None
    ) -> requests.Response:
        return self._metrics(
            run_id, "run", since=since, summarize=summarize, metric_filter=metric_filter,
            last_n=last_n,
        )  # fmt: skip

    def get_pod_metrics(self, pod_id: str, since=None, summarize=None) -> requests.Response:
        return self._metrics(pod_id, "pod", since=since, summarize=summarize)

    def download_run_metrics(self, run_id: Any, since=None, summarize=None) -> requests.Response:
        return self._metrics(run_id, "run", since=since, summarize=summarize, format="zip")

    # writes: form-encoded bodies
    def post_metric(self, run_id, name, value, cumulative=False, metadata="", date=None):  # noqa: ANN001, ANN201
        date = date or dt.datetime.now(dt.UTC).replace(tzinfo=None)  # naive UTC, as it sends
        form = {
            "run_id": run_id,
            "name": name,
            "cumulative": cumulative,
            "date": str(date),
            "value": str(value),
            "metadata": metadata,
        }
        return requests.post(self.endpoint + "metrics/", data=form, timeout=180)

    def create_run(  # noqa: ANN201
        self,
        name,  # noqa: ANN001
        num_workers,  # noqa: ANN001
        num_cpus=2.0,  # noqa: ANN001
        max_bandwidth=1000,  # noqa: ANN001
        image_name=None,  # noqa: ANN001 - the official image the client looked up
        backend=None,  # noqa: ANN001
        custom_image_name=None,  # noqa: ANN001
        custom_image_command=None,  # noqa: ANN001
        custom_backend=None,  # noqa: ANN001
        run_all_nodes=False,  # noqa: ANN001
        gpu_enabled=False,  # noqa: ANN001
        light_target=False,  # noqa: ANN001
    ):
        flag = {True: "true", False: "false"}
        form: dict[str, Any] = {
            "name": name,
            "num_workers": num_workers,
            "num_cpus": num_cpus,
            "max_bandwidth": max_bandwidth,
            "gpu_enabled": flag[gpu_enabled],
            "light_target": flag[light_target],
            "run_all_nodes": flag[run_all_nodes],
        }
        if custom_image_name is not None or image_name == "custom_image":
            form["image_name"] = "custom_image"
            form["custom_image_name"] = custom_image_name
            form["custom_image_command"] = custom_image_command
        else:
            form["image_name"] = image_name
        if custom_backend is not None:
            form["backend"] = "custom_backend"
            form["custom_backend"] = custom_backend
        elif backend is not None:
            form["backend"] = backend
        # requests leaves out None values of a form, as the client relies on
        return requests.post(self.endpoint + "runs/", data=form, timeout=30)

    def delete_run(self, run_id: Any) -> requests.Response:
        return requests.delete(f"{self.endpoint}runs/{run_id}", timeout=60)


@pytest.fixture(scope="module")
def master(postgres_url, tmp_path_factory) -> LiveMaster:
    live = start_master(postgres_url, tmp_path_factory.mktemp("mlbench-seed-client"))
    yield live
    live.down()


@pytest.fixture(scope="module")
def seed(master: LiveMaster) -> SeedWire:
    host = master.url.split("://", 1)[1].rstrip("/")
    return SeedWire(f"admin:{master.token}@{host}")


@pytest.fixture(scope="module")
def finished_run(master: LiveMaster, seed: SeedWire) -> dict:
    """A short open-division run (the sleeper script) that has ended, with its metrics."""
    command = f"{sys.executable} {SLEEPER} 0.5"
    response = requests.post(
        seed.endpoint + "runs/",
        data={"name": "seed-sleeper", "num_workers": "2", "num_cpus": "1",
              "image_name": "custom_image", "custom_image_command": command, "backend": "GLOO"},
        timeout=30,
    )  # fmt: skip
    assert response.status_code == 201, response.text
    run = response.json()
    return master.wait_state(run["id"], ("FINISHED", "FAILED"), timeout=120)


@pytest.fixture(scope="module")
def pod_point(master: LiveMaster, seed: SeedWire) -> dict:
    """A point of the first worker pod the master lists, posted by the staff user (the
    original client posts only run metrics; the master's collector writes pod metrics
    without HTTP, so its readings are not known in advance)."""
    pods = seed.get_worker_pods().json()
    assert [p["name"] for p in pods] == POD_NAMES, pods  # MLBENCH_LOCAL_WORKERS=2
    point = {"pod_name": pods[0]["name"], "name": "seed_pod_probe", "value": "0.5",
             "date": str(dt.datetime.now(dt.UTC).replace(tzinfo=None))}  # fmt: skip
    response = requests.post(seed.endpoint + "metrics/", data=point, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()


def _runs(master: LiveMaster) -> list[dict]:
    return master.get("/api/runs/").json()


# --- the ten calls -----------------------------------------------------------------------


def test_create_run_with_an_official_image_then_delete_run(master, seed):
    before = len(_runs(master))
    created = seed.create_run(
        "seed-resnet", 2, num_cpus=1.0, image_name=RESNET20, backend="MPI", light_target=True
    )
    assert created.status_code == 201, created.text
    run = created.json()
    assert (run["task"], run["backend"], run["target"], run["image"]) == (
        "resnet20-cifar10", "mpi", "light", RESNET20,
    )  # fmt: skip
    assert (run["num_workers"], run["num_cpus"], run["light_target"]) == (2, 1.0, True)
    assert run["state"] == "INITIALIZED"  # as stored; its job may have started it since
    assert len(_runs(master)) == before + 1

    got = seed.get_run(run["id"])
    assert got.status_code == 200 and got.json()["id"] == run["id"]

    deleted = seed.delete_run(run["id"])
    assert deleted.status_code == 204, deleted.text
    assert seed.get_run(run["id"]).status_code == 404
    assert len(_runs(master)) == before


def test_the_original_language_model_image_creates_a_task_3a_run(master, seed):
    image = "mlbench/pytorch-wikitext2-lstm-all-reduce:latest"
    created = seed.create_run("seed-lstm", 2, num_cpus=1.0, image_name=image, light_target=True)
    assert created.status_code == 201, created.text
    run = created.json()
    assert (run["task"], run["target"], run["image"]) == ("awd-lstm-wikitext2", "light", image)
    assert seed.delete_run(run["id"]).status_code == 204


def test_get_runs_lists_what_a_script_reads(seed, finished_run):
    response = seed.get_runs()
    assert response.status_code == 200
    runs = response.json()
    assert isinstance(runs, list)
    mine = next(r for r in runs if r["id"] == finished_run["id"])
    for field in ("id", "name", "state", "num_workers", "num_cpus", "max_bandwidth", "job_id"):
        assert field in mine
    assert mine["state"] == "FINISHED", finished_run


def test_custom_image_command_with_gloo_spelled_in_capitals(finished_run):
    assert finished_run["state"] == "FINISHED", finished_run
    assert (finished_run["image"], finished_run["backend"]) == ("custom_image", "gloo")


def test_post_metric_then_read_it_back_with_every_option(seed, finished_run):
    run_id = finished_run["id"]
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    for i in range(5):
        posted = seed.post_metric(
            run_id, "seed_loss", 1.0 / (i + 1), date=start + dt.timedelta(seconds=i)
        )
        assert posted.status_code == 201, posted.text
        body = posted.json()
        assert (body["run_id"], body["name"], body["value"], body["cumulative"]) == (
            run_id, "seed_loss", pytest.approx(1.0 / (i + 1)), False,
        )  # fmt: skip
    cumulative = seed.post_metric(run_id, "seed_count", 3, cumulative=True, date=start)
    assert cumulative.status_code == 201 and cumulative.json()["cumulative"] is True

    everything = seed.get_run_metrics(run_id)
    assert everything.status_code == 200
    series = everything.json()
    assert [p["value"] for p in series["seed_loss"]] == pytest.approx(
        [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5]
    )
    assert set(series["seed_loss"][0]) == {"date", "value"}  # the original's shape

    since = seed.get_run_metrics(run_id, since=start + dt.timedelta(seconds=2.5))
    assert since.status_code == 200, since.text
    assert [p["value"] for p in since.json()["seed_loss"]] == pytest.approx([1 / 4, 1 / 5])

    last = seed.get_run_metrics(run_id, metric_filter="seed_loss", last_n=2)
    assert last.status_code == 200, last.text
    assert list(last.json()) == ["seed_loss"]
    assert [p["value"] for p in last.json()["seed_loss"]] == pytest.approx([1 / 4, 1 / 5])

    # 5 points one second apart into 2: buckets of ceil(5 / 2) = 3 whole seconds from the
    # first point's second (docs/api.rst, summarize), each the average of its points.
    summarized = seed.get_run_metrics(run_id, metric_filter="seed_loss", summarize=2)
    assert summarized.status_code == 200, summarized.text
    assert [p["value"] for p in summarized.json()["seed_loss"]] == pytest.approx(
        [(1 + 1 / 2 + 1 / 3) / 3, (1 / 4 + 1 / 5) / 2]
    )


def test_download_run_metrics_is_a_zip(seed, finished_run):
    assert seed.post_metric(finished_run["id"], "seed_zip", 7).status_code == 201
    response = seed.download_run_metrics(finished_run["id"])
    assert response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        names = archive.namelist()
        assert {"run.json", "metrics/seed_zip.json"} <= set(names), names
        points = json.loads(archive.read("metrics/seed_zip.json"))
        described = json.loads(archive.read("run.json"))
    assert [p["value"] for p in points] == [7]
    assert described["run"]["id"] == finished_run["id"]


def test_worker_pods_and_their_metrics(seed, pod_point):
    pods = seed.get_worker_pods()
    assert pods.status_code == 200
    assert [p["name"] for p in pods.json()] == POD_NAMES
    metrics = seed.get_pod_metrics(POD_NAMES[0], since=dt.datetime(2020, 1, 1), summarize=10)
    assert metrics.status_code == 200, metrics.text
    assert metrics.json()["seed_pod_probe"] == [{"date": pod_point["date"], "value": 0.5}]


def test_get_all_metrics(seed, finished_run, pod_point):
    response = seed.get_all_metrics()  # every pod's (metric_type=pod, the default)
    assert response.status_code == 200
    assert response.json()[POD_NAMES[0]]["seed_pod_probe"] == [
        {"date": pod_point["date"], "value": 0.5}
    ]
    assert str(finished_run["id"]) not in response.json()  # runs' metrics are not pods'


def test_the_original_client_itself(master, seed, finished_run, pod_point):
    """mlbench-core 3.0.0's ApiClient, installed by `make test-deps` in .venv-seed."""
    if not SEED_PYTHON.exists():
        why = f"the original client is not installed ({SEED_PYTHON}): run `make test-deps`"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    url = seed.endpoint.removeprefix("http://").removesuffix("/api/")
    done = subprocess.run(
        [str(SEED_PYTHON), str(ORIGINAL_CLIENT), url, str(finished_run["id"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["get_runs"][0] == 200 and finished_run["id"] in got["get_runs"][1]
    assert got["get_run"] == [200, "FINISHED"]
    assert got["get_worker_pods"] == [200, POD_NAMES]
    status, point = got["post_metric"]
    assert status == 201 and point["name"] == "original_loss" and point["value"] == 0.25
    assert got["get_run_metrics"] == [200, [0.25, 0.125]]
    assert got["get_pod_metrics"] == [200, [0.5]]  # pod_point's value, read by its client
    status, pods_with_metrics = got["get_all_metrics"]
    assert status == 200 and POD_NAMES[0] in pods_with_metrics
    status, names = got["download_run_metrics"]
    assert status == 200 and {"run.json", "metrics/original_loss.json"} <= set(names)
    status, run = got["create_run"]
    assert status == 201 and (run["task"], run["backend"], run["target"], run["image"]) == (
        "resnet20-cifar10", "mpi", "light", RESNET20,
    )  # fmt: skip
    assert got["delete_run"] == [204, None]
    status, detail = got["create_run_unimplemented"]
    assert status == 400 and "not implemented" in detail


# --- bad input: a clear 4xx, nothing stored ------------------------------------------------


@pytest.mark.parametrize(
    "form, field",
    [
        ({"num_workers": "2"}, "name"),
        ({"name": "x", "num_workers": "two"}, "num_workers"),
        ({"name": "x", "num_workers": "2", "num_cpus": "lots"}, "num_cpus"),
        ({"name": "x", "num_workers": "2", "image_name": "mlbench/nope:latest"}, "image_name"),
        ({"name": "x", "num_workers": "2", "image_name": "mlbench/pytorch-wmt16-gnmt-all-reduce"}, "image_name"),
        ({"name": "x", "num_workers": "2", "image_name": RESNET20, "backend": "custom_backend",
          "custom_backend": "horovod"}, "custom_backend"),
        ({"name": "x", "num_workers": "2", "backend": "carrier-pigeon"}, "backend"),
        ({"name": "x", "num_workers": "2", "image_name": "custom_image",
          "custom_image_name": "me/mine:1", "custom_image_command": "true"}, "custom_image_name"),
        ({"name": "x", "num_workers": "2", "light_target": "maybe"}, "light_target"),
    ],
)  # fmt: skip
def test_bad_forms_answer_400_naming_the_field_and_store_nothing(master, seed, form, field):
    before = _runs(master)
    response = requests.post(seed.endpoint + "runs/", data=form, timeout=30)
    assert response.status_code == 400, response.text
    body = response.json()
    assert field in body["errors"], body
    assert f"{field}: {body['errors'][field][0]}" in body["detail"], body
    assert _runs(master) == before


def test_an_unimplemented_image_names_those_that_are(seed):
    response = seed.create_run("x", 2, image_name="mlbench/pytorch-wmt16-gnmt-all-reduce:latest")
    assert response.status_code == 400, response.text
    message = response.json()["errors"]["image_name"][0]
    assert "not implemented" in message and RESNET20 in message and EPSILON in message


def test_a_metric_form_with_a_bad_value_is_refused(master, seed, finished_run):
    before = seed.get_run_metrics(finished_run["id"]).json()
    response = seed.post_metric(finished_run["id"], "seed_bad", "fast")
    assert response.status_code == 400 and "value" in response.json()["errors"]
    response = requests.post(
        seed.endpoint + "metrics/",
        data={"run_id": finished_run["id"], "name": "seed_bad", "value": "1", "date": "yesterday"},
        timeout=30,
    )
    assert response.status_code == 400 and "date" in response.json()["errors"]
    assert seed.get_run_metrics(finished_run["id"]).json() == before


def test_a_field_given_twice_is_refused(seed):
    response = requests.post(
        seed.endpoint + "runs/",
        data=[("name", "a"), ("name", "b"), ("num_workers", "1")],
        timeout=30,
    )
    assert response.status_code == 400
    assert "given 2 times" in response.json()["errors"]["name"][0]


@pytest.mark.parametrize(
    "credentials, detail",
    [
        ("admin:wrong-token", "Invalid token."),
        ("someone-else:{token}",
         "the token does not belong to user 'someone-else': use its owner's name"),
        ("admin:", "Basic credentials need the API token as the password: user:TOKEN"),
        (":{token}", "the token does not belong to user '': use its owner's name"),
    ],
)  # fmt: skip
def test_basic_with_wrong_credentials_is_401_with_a_challenge(master, credentials, detail):
    host = master.url.split("://", 1)[1].rstrip("/")
    userinfo = credentials.format(token=master.token)
    before = _runs(master)
    response = requests.post(
        f"http://{userinfo}@{host}/api/runs/", data={"name": "x", "num_workers": "1"}, timeout=30
    )
    assert response.status_code == 401, response.text
    assert "Basic" in response.headers["WWW-Authenticate"]
    assert response.json() == {"detail": detail}
    assert _runs(master) == before


def test_without_credentials_reads_and_writes_are_401(master):
    assert requests.get(master.url + "/api/runs", timeout=30).status_code == 401
    response = requests.post(master.url + "/api/runs", data={"name": "x"}, timeout=30)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Token")


# --- everything under /api/ answers JSON ----------------------------------------------------


NO_ENDPOINT = (
    "no API endpoint at {!r}; see /api/docs/ for the endpoints (ids are whole numbers, "
    "e.g. /api/runs/3/)"
)


@pytest.mark.parametrize(
    "method, path, status, detail",
    [
        ("GET", "/api/nothing-here", 404, NO_ENDPOINT.format("/api/nothing-here")),
        ("GET", "/api/runs/abc", 404, NO_ENDPOINT.format("/api/runs/abc")),
        ("DELETE", "/api/runs/abc", 404, NO_ENDPOINT.format("/api/runs/abc")),
        ("GET", "/api/runs/999999", 404, "run 999999 does not exist"),
        ("PUT", "/api/runs/", 405, 'Method "PUT" not allowed.'),
        ("PATCH", "/api/metrics/", 405, 'Method "PATCH" not allowed.'),
        ("POST", "/api/health/", 405, 'method "POST" not allowed'),
        ("POST", "/api/pods", 405, 'Method "POST" not allowed.'),
    ],
)
def test_errors_under_api_are_json(seed, method, path, status, detail):
    url = seed.endpoint[: -len("/api/")] + path
    response = requests.request(method, url, timeout=30)
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": detail}
