"""An outside algorithm through the API (issue 44): POST /api/algorithms/ refuses with nothing
stored (not staff, over the cap, not Python, a broken declaration), stores by SHA-256; a run
naming it is checked against its declared options, carries --algorithm-source on the
worker's command line and the hash in its manifest; a worker token reads only its own
run's file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from tests.api.conftest import worker_client

pytestmark = pytest.mark.django_db

SOURCE = b'''"""Half-averaged gradients: a test algorithm."""
from mlbench_worker.algorithms.public import Algorithm, Option

NAME = "halfavg"
API = 1
OPTIONS = (
    Option("weight", "float", 0.5, "the share of the mean", above=0.0, maximum=1.0),
    Option("mode", "choice", "sum", "how", choices=("sum", "mean")),
)


class HalfAverage(Algorithm):
    def finish(self):
        return 0.0
'''
SHA = hashlib.sha256(SOURCE).hexdigest()


def upload(client, body: bytes = SOURCE, **extra):
    return client.generic("POST", "/api/algorithms/", body, content_type="text/x-python", **extra)


def stored_files(settings) -> list[Path]:
    folder = Path(settings.MLBENCH_HOME) / "algorithms"
    return sorted(folder.iterdir()) if folder.exists() else []


def create(client, **fields):
    return client.post("/api/runs/", {"name": "outside", **fields}, format="json")


def test_upload_stores_by_sha256_and_answers_the_declaration(staff_api, settings):
    response = upload(staff_api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["sha256"], body["name"], body["api"], body["size"]) == (
        SHA, "halfavg", 1, len(SOURCE)
    )  # fmt: skip
    assert [o["name"] for o in body["options"]] == ["weight", "mode"]
    assert body["options"][0]["bounds"] == "more than 0 and at most 1"
    assert [p.name for p in stored_files(settings)] == [f"{SHA}.py"]
    again = upload(staff_api)
    assert again.status_code == 200 and again.json() == body
    got = staff_api.get(f"/api/algorithms/{SHA}/")
    assert got.status_code == 200 and got.content == SOURCE
    assert got["Content-Type"].startswith("text/x-python")


def test_a_multipart_form_carries_the_file_in_field_source(staff_api, settings):
    form = {"source": SimpleUploadedFile("mine.py", SOURCE, content_type="text/x-python")}
    response = staff_api.post("/api/algorithms/", form, format="multipart")
    assert response.status_code == 201, response.json()
    assert response.json()["sha256"] == SHA
    missing = staff_api.post("/api/algorithms/", {"other": "x"}, format="multipart")
    assert missing.status_code == 400 and "source" in missing.json()["errors"]


def test_a_user_who_is_not_staff_is_refused_and_nothing_is_stored(api, anon, settings):
    response = upload(api)
    assert response.status_code == 403
    assert "only staff users may upload" in response.json()["detail"]
    assert upload(anon).status_code == 401
    assert stored_files(settings) == []


def test_a_file_over_the_cap_is_413_and_nothing_is_stored(staff_api, settings):
    settings.MLBENCH_MAX_ALGORITHM_BYTES = 100
    response = upload(staff_api)
    assert response.status_code == 413
    assert "MLBENCH_MAX_ALGORITHM_BYTES" in response.json()["detail"]
    settings.MLBENCH_MAX_ALGORITHM_BYTES = 1
    big = {"source": SimpleUploadedFile("big.py", SOURCE * 400, content_type="text/x-python")}
    form = staff_api.post("/api/algorithms/", big, format="multipart")
    assert form.status_code == 413, form.json()
    assert stored_files(settings) == []


@pytest.mark.parametrize(
    "body, words",
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not Python source: byte"),
        (b"def broken(:\n", "not Python: line 1"),
        (SOURCE.replace(b'NAME = "halfavg"\n', b""), "NAME is missing"),
        (SOURCE.replace(b'NAME = "halfavg"', b"NAME = 'half' + 'avg'"), "NAME is not a literal"),
        (SOURCE.replace(b"API = 1", b"API = 7"), "API version 7 is not supported"),
        (SOURCE.replace(b'"halfavg"', b'"topk"'), "NAME 'topk' is a built-in algorithm's"),
        (SOURCE.replace(b"0.5, ", b"float('0.5'), "), "Option's argument 3 is not a literal"),
        (SOURCE.replace(b"def finish", b"def begin"), "class HalfAverage does not define finish"),
        (SOURCE.replace(b"(Algorithm)", b"(object)"), "no class derives from Algorithm"),
        (SOURCE + b"\nclass Other(Algorithm):\n    def finish(self):\n        return 0.0\n",
         "2 classes derive from Algorithm"),
        (SOURCE.replace(b"OPTIONS = (", b"OPTIONS = make() or ("), "OPTIONS must be a tuple"),
        (b"import mlbench_worker.training.trainer\n" + SOURCE, "imports mlbench_worker.training"),
        (SOURCE.replace(b"0.5, \"the", b"5.0, \"the"), "its default is refused by its own rules"),
    ],
)  # fmt: skip
def test_a_file_that_is_no_algorithm_module_is_400_naming_why(staff_api, settings, body, words):
    response = upload(staff_api, body)
    assert response.status_code == 400, response.json()
    assert words in response.json()["errors"]["source"][0]
    assert stored_files(settings) == []


def test_a_run_naming_the_upload_gets_its_name_defaults_and_the_open_division(
    staff_api, api, redis_settings
):
    assert upload(staff_api).status_code == 201
    response = create(api, algorithm_source=SHA, algorithm_options={"weight": "0.25"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["algorithm"], body["algorithm_source"]) == ("halfavg", SHA)
    assert body["algorithm_options"] == {"weight": 0.25, "mode": "sum"}
    assert body["division"] == "open"
    assert body["manifest"]["config"]["algorithm_source"] == SHA
    assert body["manifest"]["algorithm"]["name"] == "halfavg"
    assert body["manifest"]["algorithm"]["sha256"] == SHA
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=body["id"])))
    at = argv.index("--algorithm")
    assert argv[at : at + 4] == ["--algorithm", "halfavg", "--algorithm-source", SHA]
    assert argv[at + 4 : at + 8] == [
        "--algorithm-option", "mode=sum", "--algorithm-option", "weight=0.25"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"algorithm_options": {"weight": 2}}, "algorithm_options",
         "weight must be more than 0 and at most 1, not 2"),
        ({"algorithm_options": {"rank": 4}}, "algorithm_options",
         "halfavg has no option 'rank'; its options: weight, mode"),
        ({"algorithm_options": {"mode": "max"}}, "algorithm_options",
         "mode must be one of sum, mean"),
        ({"algorithm": "topk"}, "algorithm", "is not the NAME algorithm_source"),
    ],
)  # fmt: skip
def test_a_run_with_options_outside_the_declaration_is_400_naming_them_and_stores_nothing(
    staff_api, api, redis_settings, fields, field, words
):
    assert upload(staff_api).status_code == 201
    response = create(api, algorithm_source=SHA, **fields)
    assert response.status_code == 400, response.json()
    assert any(words in m for m in response.json()["errors"][field]), response.json()
    assert not Run.objects.exists()


def test_a_run_naming_an_unknown_upload_is_400_naming_algorithm_source(api, redis_settings):
    response = create(api, algorithm_source="ab" * 32)
    assert response.status_code == 400
    said = response.json()["errors"]["algorithm_source"][0]
    assert "is stored on this master; upload it first" in said
    bad = create(api, algorithm_source="../../etc/passwd")
    assert bad.status_code == 400
    assert "is not a SHA-256" in bad.json()["errors"]["algorithm_source"][0]
    assert not Run.objects.exists()


def test_an_installed_module_is_staff_only_and_passed_as_is(api, staff_api, redis_settings):
    fields = {"algorithm": "labcode.algos.mine", "algorithm_options": {"k": "3"}}
    refused = create(api, **fields)
    assert refused.status_code == 403 and "installed algorithm" in refused.json()["detail"]
    response = create(staff_api, **fields)
    assert response.status_code == 201, response.json()
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=response.json()["id"])))
    at = argv.index("--algorithm")
    assert argv[at : at + 4] == ["--algorithm", "labcode.algos.mine", "--algorithm-option", "k=3"]
    assert "--algorithm-source" not in argv


def test_a_worker_token_reads_its_own_runs_algorithm_and_not_another(staff_api, make_run):
    assert upload(staff_api).status_code == 201
    other = SOURCE.replace(b'"halfavg"', b'"otheralgo"')
    other_sha = upload(staff_api, other).json()["sha256"]
    mine = make_run(state=Run.STARTED, algorithm="halfavg", algorithm_source=SHA)
    stranger = make_run(state=Run.FINISHED, algorithm="plain")
    got = worker_client(mine).get(f"/api/algorithms/{SHA}/")
    assert got.status_code == 200 and got.content == SOURCE
    refused = worker_client(mine).get(f"/api/algorithms/{other_sha}/")
    assert refused.status_code == 403 and "its own run's algorithm" in refused.json()["detail"]
    assert worker_client(stranger).get(f"/api/algorithms/{SHA}/").status_code == 403
    assert (
        worker_client(mine)
        .post("/api/algorithms/", SOURCE, content_type="text/x-python")
        .status_code
        == 403
    )
    assert staff_api.get(f"/api/algorithms/{'0' * 64}/").status_code == 404


def test_a_series_runs_the_upload_in_each_of_its_runs(staff_api, api, redis_settings):
    assert upload(staff_api).status_code == 201
    body = {"name": "outside series", "task": "logreg-epsilon", "seeds": [1, 2],
            "algorithm_source": SHA, "algorithm_options": {"mode": "mean"}}  # fmt: skip
    response = api.post("/api/series/", body, format="json")
    assert response.status_code == 201, response.json()
    runs = Run.objects.filter(series_id=response.json()["id"])
    assert runs.count() == 2
    for run in runs:
        assert (run.algorithm, run.algorithm_source) == ("halfavg", SHA)
        assert run.algorithm_options == {"weight": 0.5, "mode": "mean"}
