"""A bundle made before runs recorded `test_examples` (its run.json has no such field) is
imported with the number its origin's evaluator graded on, so this master's re-grade holds
its files to the same test set instead of to the whole one (runs.recover_imported_test_set)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mlbench_master.api.models import Run, Series
from mlbench_master.bundles import layout
from tests.api.predictions_bodies import N
from tests.bundles import data
from tests.bundles.test_trust import public_of

pytestmark = pytest.mark.django_db


def _without_test_examples(bundle: bytes, key: Ed25519PrivateKey) -> bytes:
    """`bundle` as an older mlbench wrote it: no `test_examples` among its runs' fields,
    signed again (by `key`, so that its manifest verifies)."""
    files = data.members(bundle)
    manifest = json.loads(files[layout.MANIFEST])
    for member in manifest["members"]:
        if member["path"].endswith("run.json"):
            record = json.loads(files[member["path"]])
            assert record["fields"].pop("test_examples") == N
            body = json.dumps(record).encode()
            files[member["path"]] = body
            member.update(sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))
    manifest["origin"] = {**manifest["origin"], "public_key": public_of(key)}
    body = json.dumps(manifest).encode()
    files[layout.MANIFEST] = body
    files[layout.SIGNATURE] = base64.b64encode(key.sign(body))
    return data.rezip(files)


def test_an_older_bundle_gets_the_test_set_its_grades_record(installations, staff):
    series = data.finished_series(staff)
    genuine = data.export(staff, f"/api/series/{series.pk}/bundle/")
    Series.objects.filter(pk=series.pk).delete()
    installations.use("here")
    answer = data.post_bundle(staff, _without_test_examples(genuine, Ed25519PrivateKey.generate()))
    assert answer.status_code == 201, answer.json()
    imported = Run.objects.filter(origin__isnull=False)
    assert imported.count() == 2
    assert set(imported.values_list("test_examples", flat=True)) == {N}
