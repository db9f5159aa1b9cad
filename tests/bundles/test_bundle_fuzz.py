"""Fuzz: POST /api/bundles/ answers a damaged bundle with a refusal (400 naming `bundle`, or
409, 413), never a 5xx, and stores nothing: no row, no file (issue 42: one byte flipped
inside a deflated member answered 500).

The corpus, from a fixed seed: a real exported bundle (a series of two finished runs,
with their predictions files) damaged by tests/api/upload_mutants.py (bytes flipped inside
each member's deflated data and in the fields of its headers, sizes declared huge, the
end record, truncations, random bytes); and bundles a hostile installation signs with its
own key, so that they pass the signature and the digests and reach the importer: members
replaced by random bytes, text that is not UTF-8, JSON of the wrong shape, and a carried
bundle (another installation's, inside) damaged in the same ways as the outer file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mlbench_master.bundles import layout
from tests.api import upload_mutants
from tests.bundles import data

pytestmark = pytest.mark.django_db

FUZZ_SEED = 42
# What POST /api/bundles/ answers a bundle it takes: 201 runs stored, 200 all were here.
TAKEN = (200, 201)


@pytest.fixture
def exported(installations, staff) -> bytes:
    series = data.finished_series(staff)
    return data.export(staff, f"/api/series/{series.pk}/bundle/")


def forged(files: dict[str, bytes], replaced: dict[str, bytes]) -> bytes:
    """A bundle of `files` with `replaced` members, its manifest listing their sizes and
    digests and signed by a new key (a hostile installation's: valid, and its own)."""
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    manifest = json.loads(files[layout.MANIFEST])
    manifest["origin"]["public_key"] = base64.b64encode(public).decode()
    files = {**files, **replaced}
    for member in manifest["members"]:
        if member["path"] in replaced:
            member["bytes"] = len(replaced[member["path"]])
            member["sha256"] = hashlib.sha256(replaced[member["path"]]).hexdigest()
    body = json.dumps(manifest).encode()
    signature = base64.b64encode(key.sign(body))
    return data.rezip({**files, layout.MANIFEST: body, layout.SIGNATURE: signature})


def hostile_contents(files: dict[str, bytes], rng: random.Random) -> dict[str, tuple[str, bytes]]:
    """Members no exporter writes, each with the member it replaces in a validly signed
    bundle (of `forged`), by what it is."""
    run = sorted(p for p in files if p.startswith("runs/"))[0].split("/")[1]
    folder = f"runs/{run}/"
    garbage = {
        "random bytes": rng.randbytes(300),
        "text that is not UTF-8": b'{"name": "\xff\xfe"}\n',
        "a JSON list": b"[1, 2, 3]\n",
        "JSON nested 100,000 deep": b"[" * 100_000,
        "an empty member": b"",
    }
    out = {}
    for name in ("run.json", "metrics.jsonl", "logs.jsonl", layout.SERIES):
        path = name if name == layout.SERIES else folder + name
        for what, body in garbage.items():
            if not (body == b"" and name.endswith(".jsonl")):  # no points, no logs: valid
                out[f"{name} holds {what}"] = (path, body)
    records = {
        "a state that is a number": {"fields": {"state": 5}},
        "fields of the wrong types": {"fields": {"state": "finished", "num_workers": "many"}},
        "a date that is no date": {"fields": {"state": "finished", "created_at": "yesterday"}},
    }
    for what, record in records.items():
        out[f"run.json holds {what}"] = (folder + "run.json", json.dumps(record).encode())
    series = {"name": 5, "seeds": "many", "worker_counts": {"a": 1}, "settings": [1]}
    out["series.json holds fields of the wrong types"] = (
        layout.SERIES,
        json.dumps(series).encode(),
    )
    points = {
        "a point whose value is text": {"name": "x", "value": "1", "date": "2026-01-01T00:00:00Z"},
        "a point whose date is a number": {"name": "x", "value": 1, "date": 5},
        "a line that is a list": [1, 2],
    }
    for what, point in points.items():
        out[f"metrics.jsonl holds {what}"] = (folder + "metrics.jsonl", json.dumps(point).encode())
    chunk = {"rank": "zero", "stream": "stdout", "seq": 1, "text": "x", "created_at": "2026-01-01"}
    out["logs.jsonl holds a chunk whose rank is text"] = (
        folder + "logs.jsonl",
        json.dumps(chunk).encode(),
    )
    return out


# Hostile contents that reached the importer's own reading (not the reader's): each is refused
# naming its member (tested one by one below, and in the corpus above).
IMPORTER_CASES = (
    "metrics.jsonl holds random bytes",
    "metrics.jsonl holds text that is not UTF-8",
    "logs.jsonl holds random bytes",
    "logs.jsonl holds text that is not UTF-8",
    "series.json holds a JSON list",
)


def _post(staff):
    return lambda body: data.post_bundle(staff, body)


def test_damaged_bundles_are_refused_never_a_500(installations, staff, exported):
    installations.use("here")
    rng = random.Random(f"{FUZZ_SEED} bundle")
    corpus = upload_mutants.zip_mutants(exported, rng, fields_each=2)
    corpus += upload_mutants.random_bodies(rng)
    corpus.append(("an empty body", b""))
    assert len(corpus) > 150
    said = upload_mutants.fuzz(_post(staff), corpus, "bundle", taken=TAKEN)
    assert upload_mutants.refused(said) > len(corpus) // 2
    for what, message in said.items():
        if what.endswith(("data flipped", "data byte flipped")):  # named: member or signature
            member = what.split(": ")[0]
            assert message and (member in message or "signature" in message), (what, message)
        if what.startswith("truncated"):
            assert message, what
    assert any("holds damaged compressed data" in str(m) for m in said.values())
    # Still serving: the bundle's runs are stored now (201), or were already by a mutant
    # whose damage the reader need not see (200: every run here already).
    one_was_taken = upload_mutants.refused(said) < len(said)
    assert data.post_bundle(staff, exported).status_code == (200 if one_was_taken else 201)


def test_hostile_signed_bundles_are_refused_never_a_500(installations, staff, exported):
    installations.use("here")
    files = data.members(exported)
    hostile = hostile_contents(files, random.Random(f"{FUZZ_SEED} signed"))
    corpus = [(what, forged(files, {path: body})) for what, (path, body) in hostile.items()]
    said = upload_mutants.fuzz(_post(staff), corpus, "bundle", taken=TAKEN)
    assert [w for w, m in said.items() if m is None] == [], said
    for what, message in said.items():
        assert what.split(" ")[0] in message, (what, message)  # the member named
    assert data.post_bundle(staff, exported).status_code == 201


def test_a_damaged_carried_bundle_is_refused_naming_it(installations, staff, exported):
    """Another installation's bundle inside one signed by a hostile key: the outer
    signature and digests hold, so the carried file's own bytes are read, and damaged."""
    installations.use("here")
    assert data.post_bundle(staff, exported).status_code == 201
    imported = staff.get("/api/series/").json()
    series = max(s["id"] for s in (imported["results"] if "results" in imported else imported))
    outer = data.export(staff, f"/api/series/{series}/bundle/")
    files = data.members(outer)
    carried = next(p for p in files if p.startswith("carried/"))
    installations.use("third")
    rng = random.Random(f"{FUZZ_SEED} carried")
    inner = upload_mutants.zip_mutants(files[carried], rng, fields_each=1)
    corpus = [(f"carried: {w}", forged(files, {carried: b})) for w, b in rng.sample(inner, 25)]
    said = upload_mutants.fuzz(_post(staff), corpus, "bundle", taken=TAKEN)
    assert upload_mutants.refused(said) == len(corpus), said  # its digest names other bytes
    assert all(carried in message for message in said.values()), said
    inside = [m for m in said.values() if m.startswith(f"bundle: the carried bundle {carried!r}")]
    assert len(inside) > len(corpus) // 2, said  # refused by what is wrong inside it


@pytest.mark.parametrize("case", IMPORTER_CASES)
def test_what_the_importer_reads_is_refused_naming_the_member(installations, staff, exported, case):
    installations.use("here")
    files = data.members(exported)
    path, body = hostile_contents(files, random.Random(f"{FUZZ_SEED} signed"))[case]
    before = upload_mutants.stored_state()
    try:
        r = data.post_bundle(staff, forged(files, {path: body}))
    finally:
        assert upload_mutants.stored_state() == before
    assert r.status_code == 400 and path in r.json()["errors"]["bundle"][0], r.json()
