"""A run trained with an uploaded algorithm (issue 44) leaves its installation with the code:
the bundle carries ``runs/<id>/algorithm.py``, listed and hashed in the signed manifest; the
importing master stores the file and keeps the run's name and hash, and serves the source.
A member that is not the file the run names is refused; a bundle without it (older, or a
built-in algorithm) imports as before."""

from __future__ import annotations

import json

import pytest

from mlbench_master.api.models import Run
from mlbench_master.bundles import layout, signing
from mlbench_master.runs import algorithm_files
from tests.api.test_outside_algorithm import SHA, SOURCE
from tests.bundles import data
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db

EVALS = [(10.0, 0.6, 1.0), (20.0, 0.85, 2.0)]


def _run_with_algorithm(staff) -> Run:
    response = staff.post("/api/algorithms/", SOURCE, content_type="text/x-python")
    assert response.status_code == 201, response.json()
    run = Maker(staff).run(None, 1, 2, EVALS)
    Run.objects.filter(pk=run.pk).update(
        algorithm="halfavg", algorithm_source=SHA, algorithm_options={"weight": 0.5}
    )
    return Run.objects.get(pk=run.pk)


def _resigned(files: dict[str, bytes]) -> bytes:
    """`files` as a bundle signed again by this installation (a bundle an origin made)."""
    manifest = json.loads(files[layout.MANIFEST])
    manifest["members"] = [m for m in manifest["members"] if m["path"] in files]  # unlisted too
    body = json.dumps(manifest).encode()
    files = {**files, layout.MANIFEST: body}
    files[layout.SIGNATURE] = signing.sign(body).encode()  # as the origin: before use()
    return data.rezip(files)


def test_the_bundle_carries_the_source_and_the_import_keeps_name_hash_and_file(
    installations, staff
):
    run = _run_with_algorithm(staff)
    bundle = data.export(staff, f"/api/runs/{run.pk}/bundle/")
    files = data.members(bundle)
    member = f"runs/{run.pk}/algorithm.py"
    assert files[member] == SOURCE
    listed = {m["path"]: m for m in data.manifest(bundle)["members"]}
    assert listed[member]["sha256"] == SHA  # signed with the rest
    Run.objects.filter(pk=run.pk).delete()  # as if on another master

    installations.use("here")
    assert algorithm_files.source(SHA) is None
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 201, answer.json()
    copy = staff.get(f"/api/runs/{answer.json()['runs'][0]['id']}/").json()
    assert (copy["algorithm"], copy["algorithm_source"]) == ("halfavg", SHA)
    assert copy["division"] == "open"
    assert algorithm_files.source(SHA) == SOURCE
    assert staff.get(f"/api/algorithms/{SHA}/").content == SOURCE


def test_a_member_that_is_not_the_runs_file_is_refused(installations, staff):
    run = _run_with_algorithm(staff)
    files = data.members(data.export(staff, f"/api/runs/{run.pk}/bundle/"))
    other = SOURCE.replace(b'"halfavg"', b'"swapped"')
    member = f"runs/{run.pk}/algorithm.py"
    files[member] = other
    manifest = json.loads(files[layout.MANIFEST])
    for m in manifest["members"]:
        if m["path"] == member:
            m["sha256"] = algorithm_files.algorithm_source.sha256(other)
            m["bytes"] = len(other)
    files[layout.MANIFEST] = json.dumps(manifest).encode()
    bundle = _resigned(files)
    Run.objects.filter(pk=run.pk).delete()
    installations.use("here")
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 400, answer.json()
    assert "not the run's algorithm_source" in answer.json()["errors"]["bundle"][0]
    assert not Run.objects.exists()
    assert algorithm_files.source(algorithm_files.algorithm_source.sha256(other)) is None


def test_a_bundle_without_the_member_still_imports(installations, staff):
    run = _run_with_algorithm(staff)
    files = data.members(data.export(staff, f"/api/runs/{run.pk}/bundle/"))
    del files[f"runs/{run.pk}/algorithm.py"]
    bundle = _resigned(files)
    Run.objects.filter(pk=run.pk).delete()
    installations.use("here")
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 201, answer.json()
    copy = Run.objects.get(pk=answer.json()["runs"][0]["id"])
    assert copy.algorithm_source == SHA and algorithm_files.source(SHA) is None
