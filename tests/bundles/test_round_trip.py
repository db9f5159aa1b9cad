"""A finished series leaves one installation as a signed bundle and enters another:
everything the origin stored arrives unchanged, the statistics this master computes from
it equal the origin's, and the origin is shown. Refused bundles: test_refused.py; the
command line against two live masters: tests/client/test_bundles_cli.py."""

from __future__ import annotations

import io
import os
import stat
import zipfile

import pytest

from mlbench_master.api.models import ImportedBundle, Run, RunOrigin, Series
from mlbench_master.bundles import layout, signing
from mlbench_master.results.statistics import for_series
from tests.bundles import data

pytestmark = pytest.mark.django_db


def test_installation_key_is_made_once_private_and_shown(installations, user, client):
    home = installations.use("here")
    answer = user.get("/api/installation/").json()
    key = home / signing.KEY_FILE
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert answer == {
        "public_key": signing.this_installation().public_key,
        "fingerprint": signing.fingerprint(answer["public_key"]),
        "algorithm": "Ed25519",
        "bundle_format": layout.VERSION,
    }
    assert "PRIVATE" not in str(answer)
    assert user.get("/api/installation/").json() == answer  # the same key, read again
    # Every page names the installation: its fingerprint and public key in the footer.
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username="alice"))
    page = client.get("/runs/").content.decode()
    assert answer["fingerprint"] in page and answer["public_key"] in page
    # Another MLBENCH_HOME is another installation, with another key.
    installations.use("third")
    assert user.get("/api/installation/").json()["public_key"] != answer["public_key"]


def test_the_export_is_signed_and_lists_every_member(installations, staff):
    series = data.finished_series(staff)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    files = data.members(bundle)
    manifest = data.manifest(bundle)
    me = signing.this_installation()
    assert manifest["origin"]["public_key"] == me.public_key
    assert signing.verify(me.public_key, files[layout.SIGNATURE].decode(), files[layout.MANIFEST])
    listed = {m["path"]: m for m in manifest["members"]}
    assert set(listed) == set(files) - {layout.MANIFEST, layout.SIGNATURE}
    runs = sorted(series.runs.values_list("pk", flat=True))
    assert manifest["runs"] == runs and manifest["series"] == series.pk
    for run_id in runs:
        folder = f"runs/{run_id}/"
        for name in (*layout.RUN_FILES, "mllog.txt", "predictions/predictions-step0000000010.npz"):
            assert folder + name in files, folder + name
        lines = files[folder + "metrics.jsonl"].decode().splitlines()
        assert len(lines) == len(data.points(Run.objects.get(pk=run_id)))
        assert ":::MLLOG" in files[folder + "mllog.txt"].decode()
        system = __import__("json").loads(files[folder + "system.json"])
        assert system["host_processor_model_name"] == "x" and system["submitter"] == "mlbench"
    assert manifest["exporter"]["user"] == "root"


def test_a_series_travels_to_another_installation_unchanged(installations, staff):
    series = data.finished_series(staff)
    # A model and its audit where the master keeps them (issue 31): they travel too.
    model = installations.homes["origin"] / "models" / str(series.runs.order_by("id")[0].pk)
    model.mkdir(parents=True)
    (model / "model.onnx").write_bytes(b"\x08\x07onnx-bytes")
    (model / "audit.json").write_text('{"verdict": "ok"}')
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    origin = signing.this_installation()
    expected_stats = data.without_run_ids(for_series(series))
    originals = list(series.runs.order_by("id"))

    home = installations.use("here")
    response = data.post_bundle(staff, bundle)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["stored"] == 2 and len(body["series"]) == 1
    copy = Series.objects.get(pk=body["series"][0])
    assert copy.pk != series.pk and copy.name == series.name
    copies = list(copy.runs.order_by("id"))
    for original, imported in zip(originals, copies, strict=True):
        assert imported.pk != original.pk and imported.state == original.state
        assert data.points(imported) == data.points(original)
        assert data.logs(imported) == data.logs(original)
        assert imported.summary == original.summary and imported.manifest == original.manifest
        assert imported.started_at == original.started_at
        assert imported.origin.origin_run == original.pk
        assert imported.origin.origin_fingerprint == origin.fingerprint
        # The predictions file arrived byte for byte and this master's evaluator agrees.
        name = "predictions-step0000000010.npz"
        assert (home / "predictions" / str(imported.pk) / name).read_bytes() == (
            installations.homes["origin"] / "predictions" / str(original.pk) / name
        ).read_bytes()
        verdict = imported.origin.regrade
        assert verdict["status"] == "re-graded" and verdict["disagreements"] == 0
        assert verdict["steps"][0]["agrees"] is True
    assert (
        home / "models" / str(copies[0].pk) / "model.onnx"
    ).read_bytes() == b"\x08\x07onnx-bytes"
    assert (home / "models" / str(copies[0].pk) / "audit.json").read_text() == '{"verdict": "ok"}'
    assert not (home / "models" / str(copies[1].pk)).exists()
    # Statistics: computed here, by this master's code, from what arrived.
    assert data.without_run_ids(for_series(copy)) == expected_stats
    # The API shows the origin with each run and with the series.
    shown = staff.get(f"/api/runs/{copies[0].pk}/").json()["origin"]
    assert shown["fingerprint"] == origin.fingerprint and shown["origin_run"] == originals[0].pk
    assert shown["imported_by"] == "root" and shown["exported_by"] == "root"
    listed = {r["id"]: r["origin"] for r in staff.get("/api/runs/").json()}
    assert listed[originals[0].pk] is None and listed[copies[0].pk]["fingerprint"]
    assert (
        staff.get(f"/api/series/{copy.pk}/").json()["origin"]["fingerprint"] == origin.fingerprint
    )
    # The file its origin signed is kept, to export the runs again with that signature.
    kept = ImportedBundle.objects.get()
    assert (home / "bundles" / f"{kept.digest}.zip").read_bytes() == bundle


def test_imported_twice_is_stored_once(installations, staff):
    series = data.finished_series(staff)
    whole = data.export(staff, f"/api/series/{series.pk}/bundle/")
    first = series.runs.order_by("id").first()
    single = data.export(staff, f"/api/runs/{first.pk}/bundle/")
    installations.use("here")
    assert data.post_bundle(staff, whole).status_code == 201
    runs_before = Run.objects.count()
    again = data.post_bundle(staff, whole)
    assert again.status_code == 200 and again.json()["stored"] == 0
    assert all(not r["new"] for r in again.json()["runs"])
    # The same origin run in another bundle (exported alone): still one copy.
    other = data.post_bundle(staff, single)
    assert other.status_code == 200 and other.json()["stored"] == 0
    assert Run.objects.count() == runs_before
    assert RunOrigin.objects.count() == 2 and Series.objects.count() == 2
    assert ImportedBundle.objects.count() == 2  # two files, each stored once


def test_re_export_keeps_the_origin_signature(installations, staff):
    series = data.finished_series(staff)
    origin = signing.this_installation()
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    installations.use("here")
    middle = signing.this_installation()
    copy = Series.objects.get(pk=data.post_bundle(staff, bundle).json()["series"][0])
    again = data.export(staff, f"/api/series/{copy.pk}/bundle/")
    manifest = data.manifest(again)
    assert manifest["origin"]["public_key"] == middle.public_key and manifest["runs"] == []
    (carried,) = manifest["carried"]
    assert data.members(again)[carried["bundle"]] == bundle  # the origin's own bytes
    # The third installation has never seen these runs: the middle one's copies are gone
    # from the shared test database (a staff user may delete imported runs).
    assert staff.delete(f"/api/series/{copy.pk}/").status_code == 204
    ImportedBundle.objects.all().delete()
    installations.use("third")
    body = data.post_bundle(staff, again).json()
    third = Series.objects.get(pk=body["series"][0])
    assert body["stored"] == 2 and third.pk != series.pk
    # The bundle stored is the origin's; the middle one's only carried it.
    assert body["bundle"]["origin"]["fingerprint"] == origin.fingerprint
    assert ImportedBundle.objects.count() == 1
    for run in third.runs.all():
        assert run.origin.origin_fingerprint == origin.fingerprint  # not the middle one
        assert run.origin.bundle.received_via[0]["fingerprint"] == middle.fingerprint


def test_a_disagreeing_grade_is_shown(installations, staff):
    series = data.finished_series(staff, wrong_grade=True)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    installations.use("here")
    body = data.post_bundle(staff, bundle).json()
    verdicts = {
        r["id"]: staff.get(f"/api/runs/{r['id']}/").json()["origin"]["regrade"]
        for r in body["runs"]
    }
    first, second = (verdicts[k] for k in sorted(verdicts))
    assert first["disagreements"] == 1 and first["steps"][0]["agrees"] is False
    assert first["steps"][0]["origin"] == {"evaluated_val_accuracy": 0.5}
    assert first["steps"][0]["here"] == {"evaluated_val_accuracy": 0.98}
    assert second["disagreements"] == 0


def test_only_ended_runs_travel(installations, staff):
    running = Run.objects.create(name="r", state=Run.STARTED)
    response = staff.get(f"/api/runs/{running.pk}/bundle/")
    assert response.status_code == 409 and "STARTED" in response.json()["detail"]
    assert staff.get("/api/runs/bundle/?runs=999999").status_code == 404
    assert staff.get("/api/runs/bundle/?runs=x").status_code == 400
    # Several runs in one bundle.
    done = [Run.objects.create(name=f"d{i}", state=Run.FINISHED) for i in range(2)]
    bundle = data.export(staff, f"/api/runs/bundle/?runs={done[0].pk},{done[1].pk}")
    assert data.manifest(bundle)["runs"] == [done[0].pk, done[1].pk]
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        assert zf.testzip() is None
