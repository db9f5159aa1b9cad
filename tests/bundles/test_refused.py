"""Bundles that must not enter: tampered after signing (a byte of a member, a member added
or removed, a signature by another key) and hostile files (not a zip, a path climbing out,
a zip bomb, an unknown format version). Each is refused with an error naming the member or
the signature, before anything is written: no row, no file; and the master keeps serving."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mlbench_master.api.models import ImportedBundle, LogChunk, Metric, Run, RunOrigin, Series
from mlbench_master.bundles import layout, signing
from tests.bundles import data

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed(installations, staff) -> dict:
    """A series' bundle from the origin, as its members, and the origin's home."""
    series = data.finished_series(staff)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    first = min(series.runs.values_list("pk", flat=True))
    return {"bundle": bundle, "files": data.members(bundle), "run": first}


def _refused(installations, staff, body: bytes, *words: str) -> str:
    """POST `body` where nothing of it may be stored; the error must say `words`."""
    home = installations.use("here")
    counts = _counts()
    response = data.post_bundle(staff, body)
    assert response.status_code == 400, response.json()
    detail = response.json()["errors"]["bundle"][0]
    for word in words:
        assert word in detail, detail
    assert _counts() == counts and data.home_files(home) == []
    assert staff.get("/api/runs/").status_code == 200  # still serving
    return detail


def _counts() -> tuple:
    return tuple(
        m.objects.count() for m in (Run, Series, Metric, LogChunk, RunOrigin, ImportedBundle)
    )


def _resign(files: dict[str, bytes], manifest: dict, key: Ed25519PrivateKey | None = None) -> dict:
    """`files` with `manifest` and its signature by `key` (default: the installation's)."""
    body = json.dumps(manifest).encode()
    if key is None:
        signature = signing.sign(body)
    else:
        import base64

        signature = base64.b64encode(key.sign(body)).decode()
    return {**files, layout.MANIFEST: body, layout.SIGNATURE: signature.encode()}


def test_one_byte_of_one_member_changed(installations, staff, signed):
    path = f"runs/{signed['run']}/metrics.jsonl"
    files = dict(signed["files"])
    text = files[path]
    at = text.index(b'"value": ') + len(b'"value": ')
    files[path] = text[:at] + (b"1" if text[at : at + 1] != b"1" else b"2") + text[at + 1 :]
    assert len(files[path]) == len(text)
    _refused(installations, staff, data.rezip(files), path, "SHA-256", "changed after signing")


def test_a_member_added_or_removed(installations, staff, signed):
    added = {**signed["files"], f"runs/{signed['run']}/model/audit.json": b"{}"}
    _refused(installations, staff, data.rezip(added), "audit.json", "not in the signed manifest")
    removed = dict(signed["files"])
    gone = f"runs/{signed['run']}/logs.jsonl"
    del removed[gone]
    _refused(installations, staff, data.rezip(removed), gone, "missing from the file")


def test_a_signature_from_another_key(installations, staff, signed):
    manifest = json.loads(signed["files"][layout.MANIFEST])
    manifest["exporter"]["user"] = "mallory"
    forged = _resign(signed["files"], manifest, Ed25519PrivateKey.generate())
    _refused(installations, staff, data.rezip(forged), "signature", "does not verify")
    # The manifest changed, its signature kept.
    changed = {**signed["files"], layout.MANIFEST: json.dumps(manifest).encode()}
    _refused(installations, staff, data.rezip(changed), "signature")


@pytest.mark.parametrize(
    ("number", "words"), [("NaN", "NaN is not a JSON number"), ("1e400", "beyond a float64")]
)
def test_a_point_holding_nan_signed_by_its_origin(installations, staff, signed, number, words):
    """NaN and Infinity are not JSON, though Python's reader takes them, and it makes 1e400
    infinite: a signed bundle whose point carries one is refused, not stored as null or as
    a number."""
    import hashlib

    path = f"runs/{signed['run']}/metrics.jsonl"
    lines = signed["files"][path].splitlines()
    point = json.loads(lines[0])
    point["metadata"] = {**(point.get("metadata") or {}), "loss_scale": "SLOT"}
    text = json.dumps(point).replace('"SLOT"', number).encode()
    text = b"\n".join([text, *lines[1:]]) + b"\n"
    manifest = json.loads(signed["files"][layout.MANIFEST])
    member = next(m for m in manifest["members"] if m["path"] == path)
    member.update(sha256=hashlib.sha256(text).hexdigest(), bytes=len(text))
    installations.use("origin")
    files = _resign({**signed["files"], path: text}, manifest)
    _refused(installations, staff, data.rezip(files), path, words)


def test_not_a_zip(installations, staff):
    _refused(installations, staff, b"PK\x03\x04 this is no zip at all" * 10, "not a zip")
    _refused(installations, staff, b'{"format": "mlbench-result-bundle"}', "not a zip")


def test_a_path_that_climbs_out(installations, staff, signed):
    for path in ("../../etc/cron.d/evil", "/etc/passwd", "runs/1/../../x", "runs\\1\\run.json"):
        files = {**signed["files"], path: b"x"}
        _refused(installations, staff, data.rezip(files), repr(path)[:20].rstrip("'"))
    # Listed in a validly signed manifest, it is refused all the same.
    manifest = json.loads(signed["files"][layout.MANIFEST])
    manifest["members"].append({"path": "runs/1/../../../x", "sha256": "0" * 64, "bytes": 1})
    installations.use("origin")
    files = _resign({**signed["files"], "runs/1/../../../x": b"x"}, manifest)
    _refused(installations, staff, data.rezip(files), "climbs out")


def test_a_zip_bomb(installations, staff, signed, settings):
    bomb = {**signed["files"], f"runs/{signed['run']}/model/model.onnx": bytes(50 * 1024 * 1024)}
    packed = data.rezip(bomb)
    assert len(packed) < 2 * 1024 * 1024  # 50 MB of zeros pack into a few hundred KB
    _refused(installations, staff, packed, "model.onnx", "zip bomb")
    # Within the ratio but over what this master unpacks in all.
    settings.MLBENCH_BUNDLE_MAX_UNPACKED_BYTES = 10_000
    _refused(installations, staff, signed["bundle"], "MLBENCH_BUNDLE_MAX_UNPACKED_BYTES")


def test_an_unknown_format_version(installations, staff, signed):
    manifest = json.loads(signed["files"][layout.MANIFEST])
    manifest["format_version"] = 99
    files = _resign(signed["files"], manifest)  # signed by its own origin: still refused
    _refused(installations, staff, data.rezip(files), "format version 99", "reads version 1")


def test_too_large_an_upload(installations, staff, signed, settings):
    settings.MLBENCH_BUNDLE_MAX_BYTES = 1000
    installations.use("here")
    response = data.post_bundle(staff, signed["bundle"])
    assert response.status_code == 413 and "MLBENCH_BUNDLE_MAX_BYTES" in response.json()["detail"]
    assert Run.objects.count() == 2


def test_own_runs_and_who_may_import(installations, staff, user, signed):
    # Back to the installation that made them: they are its own.
    response = data.post_bundle(staff, signed["bundle"])
    assert response.status_code == 409 and "this installation" in response.json()["detail"]
    installations.use("here")
    from rest_framework.test import APIClient

    assert data.post_bundle(APIClient(), signed["bundle"]).status_code == 401  # no token
    run = Run.objects.get(pk=signed["run"])
    from mlbench_master.runs import lifecycle

    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    refused = data.post_bundle(worker, signed["bundle"])  # a token without the right
    assert refused.status_code == 403 and "worker token" in refused.json()["detail"]
    assert RunOrigin.objects.count() == 0
    # A user with a token may import (POST needs a token or a session, never anonymous).
    assert data.post_bundle(user, signed["bundle"]).status_code == 201
    # A form body is not a bundle.
    response = user.post("/api/bundles/", {"bundle": io.BytesIO(signed["bundle"])})
    assert response.status_code == 400 and "application/zip" in response.json()["detail"]
    assert zipfile.is_zipfile(io.BytesIO(signed["bundle"]))
