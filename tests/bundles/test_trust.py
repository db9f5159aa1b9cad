"""Trust is earned, not assumed (issue 42): a bundle re-signed by a key this installation
has never seen is imported as an "unverified origin" and ranked nowhere; trusting the key
ranks it, on this master's own grades; removing the key unranks it again; a grade this
master's evaluator disagrees with is "disputed", shown with both numbers and never ranked,
whoever signed it.

The attack: take a genuine bundle, change its grades (or its clock), list the new digests
in the manifest, name your own key as the origin (claiming the genuine fingerprint), sign
with it. The signature verifies; the question is what the board does with it."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mlbench_master.api.models import RunOrigin, Series
from mlbench_master.bundles import layout, signing
from tests.api.predictions_bodies import CIFAR, N
from tests.bundles import data

pytestmark = pytest.mark.django_db
GRADE = "evaluated_val_accuracy"


def public_of(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def forge(bundle: bytes, key: Ed25519PrivateKey, change) -> bytes:
    """`bundle` with every run's metric points passed through `change(point)`, its manifest
    listing the new digests, naming `key` as the origin (and claiming the genuine
    fingerprint), signed with `key`: a bundle whose signature verifies."""
    files = data.members(bundle)
    manifest = json.loads(files[layout.MANIFEST])
    for member in manifest["members"]:
        if member["path"].endswith("metrics.jsonl"):
            lines = [json.loads(line) for line in files[member["path"]].decode().splitlines()]
            body = "".join(json.dumps(change(p)) + "\n" for p in lines).encode()
            files[member["path"]] = body
            member.update(sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))
    claimed = manifest["origin"]["fingerprint"]
    manifest["origin"] = {"public_key": public_of(key), "fingerprint": claimed, "algorithm": "Ed25519"}  # fmt: skip
    body = json.dumps(manifest).encode()
    files[layout.MANIFEST] = body
    files[layout.SIGNATURE] = base64.b64encode(key.sign(body))
    return data.rezip(files)


def graded(value: float | None = None, elapsed: float | None = None):
    """A `change` that rewrites the evaluator's grades (their value, their clock)."""

    def change(point: dict) -> dict:
        if point["name"] == GRADE:
            if value is not None:
                point["value"] = value
            if elapsed is not None:
                point["metadata"]["elapsed"] = elapsed
        return point

    return change


@pytest.fixture
def bundles(installations, staff) -> dict:
    """A genuine series' bundle from the origin, and Mallory's copy with every grade made
    0.999; the origin's own rows gone from the shared test database (another master)."""
    series = data.finished_series(staff)
    genuine = data.export(staff, f"/api/series/{series.pk}/bundle/")
    origin = signing.this_installation()
    mallory = Ed25519PrivateKey.generate()
    Series.objects.filter(pk=series.pk).delete()
    installations.use("here")
    return {
        "genuine": genuine,
        "forged": forge(genuine, mallory, graded(value=0.999)),
        "origin": origin,
        "mallory": public_of(mallory),
    }


def _import(staff, body: bytes) -> dict:
    answer = data.post_bundle(staff, body)
    assert answer.status_code == 201, answer.json()
    return answer.json()


def _entries(staff, series: int) -> list[tuple[dict, dict]]:
    """The board's entries of `series` with their sections, by worker count."""
    board = staff.get("/api/results/", {"task": CIFAR}).json()
    found = [(s, e) for s in board["sections"] for e in s["entries"] if e["series"] == series]
    return sorted(found, key=lambda se: se[1]["workers"])


def _trust(staff, key: str, name: str) -> None:
    answer = staff.post("/api/trust/", {"key": key, "name": name}, format="json")
    assert answer.status_code == 201, answer.json()


def test_a_bundle_re_signed_by_an_unknown_key_is_unverified_and_ranks_nowhere(staff, bundles):
    forged = _import(staff, bundles["forged"])
    genuine = _import(staff, bundles["genuine"])
    assert {r["trust"] for r in forged["runs"] + genuine["runs"]} == {"unverified origin"}
    # The fingerprint is this master's, from the key that signed: not the one claimed.
    run = staff.get(f"/api/runs/{forged['runs'][0]['id']}/").json()
    assert run["origin"]["fingerprint"] == signing.fingerprint(bundles["mallory"])
    assert run["origin"]["fingerprint"] != bundles["origin"].fingerprint
    assert run["origin"]["trust"] == {
        "status": "unverified",
        "trusted": False,
        "name": None,
        "label": "unverified origin",
    }
    for series in (forged["series"][0], genuine["series"][0]):
        for section, entry in _entries(staff, series):
            assert section["origins"] == "unverified" and "unverified origins" in section["label"]
            assert entry["rank"] is None and entry["unranked"].startswith("unverified origin")
            assert entry["origin"]["trust"]["label"] == "unverified origin"
    # Nothing trusted: no section of this task ranks anything.
    board = staff.get("/api/results/", {"task": CIFAR}).json()
    assert all(e["rank"] is None for s in board["sections"] for e in s["entries"])
    narrowed = staff.get("/api/results/", {"task": CIFAR, "origin": "unverified"}).json()
    assert narrowed["count"] == 4 and narrowed["count"] == board["count"]
    assert staff.get("/api/results/", {"task": CIFAR, "origin": "trusted"}).json()["count"] == 0


def test_trusting_the_key_ranks_on_this_masters_grades_and_removing_it_unranks(staff, bundles):
    series = _import(staff, bundles["genuine"])["series"][0]
    _trust(staff, bundles["origin"].public_key, "Lab A")
    entries = _entries(staff, series)
    assert [e["rank"] for _, e in entries] == [1, 2]  # a tie: fewer workers first
    for section, entry in entries:
        assert section["origins"] == "trusted" and "unverified" not in section["label"]
        assert entry["origin"]["trust"]["label"] == "trusted (Lab A)"
        assert entry["regrade"]["status"] == "agrees" and entry["regrade"]["disputes"] == []
        assert entry["score"] == 30.25  # the graded file's clock: the first grade over 0.9
    run = staff.get(f"/api/runs/{entries[0][1]['runs'][0]['id']}/").json()
    assert run["origin"]["trust"]["label"] == "trusted (Lab A)"
    gone = staff.delete(f"/api/trust/{bundles['origin'].fingerprint}/")
    assert gone.status_code == 200 and gone.json()["runs"] == 2
    assert all(e["rank"] is None for _, e in _entries(staff, series))
    assert all(s["origins"] == "unverified" for s, _ in _entries(staff, series))
    run = staff.get(f"/api/runs/{entries[0][1]['runs'][0]['id']}/").json()
    assert run["origin"]["trust"]["label"] == "unverified origin"


def test_a_disagreeing_re_grade_is_disputed_with_both_numbers_even_when_trusted(staff, bundles):
    forged = _import(staff, bundles["forged"])["series"][0]
    genuine = _import(staff, bundles["genuine"])["series"][0]
    _trust(staff, bundles["origin"].public_key, "Lab A")
    _trust(staff, bundles["mallory"], "Mallory")  # the operator was fooled: still not ranked
    for section, entry in _entries(staff, forged):
        assert section["origins"] == "trusted"
        assert entry["rank"] is None and entry["regrade"]["status"] == "disputed"
        (dispute,) = entry["regrade"]["disputes"]
        assert dispute["origin"] == {GRADE: 0.999} and dispute["here"] == {GRADE: 0.98}
        assert dispute["step"] == 10 and dispute["run"] == entry["runs"][0]["id"]
        assert entry["unranked"].startswith("disputed: ")
        assert "the origin graded 0.999, this master 0.98" in entry["unranked"]
    # The genuine series ranks in the same section, above nothing forged.
    ranked = [(s["label"], e["rank"]) for s, e in _entries(staff, genuine)]
    assert [rank for _, rank in ranked] == [1, 2]
    forged_sections = {s["label"] for s, _ in _entries(staff, forged)}
    assert forged_sections == {label for label, _ in ranked}


def test_a_forged_clock_ranks_only_where_its_signer_is_trusted(staff, bundles, installations):
    """The grade kept, its clock moved to 1 s: this master's evaluator agrees with the
    grade (the clock is the signer's word alone), so only trust keeps it off the board."""
    mallory = Ed25519PrivateKey.generate()
    fast = forge(bundles["genuine"], mallory, graded(elapsed=1.0))
    series = _import(staff, fast)["series"][0]
    assert all(e["rank"] is None for _, e in _entries(staff, series))
    _trust(staff, public_of(mallory), "Mallory")
    entries = _entries(staff, series)
    assert [e["rank"] for _, e in entries] == [1, 2] and entries[0][1]["score"] == 1.0


def test_grades_without_a_predictions_file_are_not_ranked_on(staff, bundles):
    """A trusted origin's bundle with an extra grade (0.999 at 1 s) of an evaluation whose
    predictions file it does not hold: this master ranks the grades it made itself, so the
    extra one counts for nothing."""
    key = Ed25519PrivateKey.generate()

    def extra(point: dict) -> dict:
        if point["name"] == "val_accuracy" and point["metadata"].get("step") == 20:
            point["name"] = GRADE  # the run's own second evaluation passed off as a grade
            point["value"], point["metadata"] = 0.999, {**point["metadata"], "elapsed": 1.0}
        return point

    series = _import(staff, forge(bundles["genuine"], key, extra))["series"][0]
    _trust(staff, public_of(key), "Lab K")
    entries = _entries(staff, series)
    assert [e["rank"] for _, e in entries] == [1, 2]
    for _, entry in entries:
        assert entry["regrade"]["status"] == "agrees"
        assert entry["score"] == 30.25  # this master's grade, at its own evaluation


def test_a_second_grade_of_a_graded_step_is_disputed(staff, bundles):
    """The same, at the step this master re-graded: the bundle holds two grades of it."""
    key = Ed25519PrivateKey.generate()

    def twice(point: dict) -> dict:
        if point["name"] == "val_accuracy" and point["metadata"].get("step") == 10:
            point["name"], point["value"] = GRADE, 0.999
            point["metadata"] = {**point["metadata"], "elapsed": 1.0}
        return point

    series = _import(staff, forge(bundles["genuine"], key, twice))["series"][0]
    _trust(staff, public_of(key), "Lab K")
    for _, entry in _entries(staff, series):
        assert entry["rank"] is None and entry["regrade"]["status"] == "disputed"
        assert entry["regrade"]["disputes"][0]["origin"] == {GRADE: 0.999}


def test_each_entry_says_how_many_examples_it_was_graded_on(staff, bundles):
    series = _import(staff, bundles["genuine"])["series"][0]
    for section, entry in _entries(staff, series):
        assert entry["test_examples"] == N and entry["whole_test_set"] == 10_000
        assert entry["graded_on"] == f"graded on {N:,} of 10,000 examples"
        assert section["test_examples"] == N and section["graded_on"] in section["label"]


def test_a_run_this_master_could_not_re_grade_ranks_only_for_a_trusted_key(staff, bundles):
    """Where this master lacks the test set (here: the verdict as regrade.py stores it when
    the real labels are not under MLBENCH_DATA_DIR), the origin's grades are all there is:
    said so, and ranked only where the key is trusted (docs/publishing.rst)."""
    series = _import(staff, bundles["genuine"])["series"][0]
    why = "this master lacks the test set: the test labels are not under /data"
    RunOrigin.objects.filter(run__series=series).update(
        regrade={"status": "not re-graded", "why": why}
    )
    for _, entry in _entries(staff, series):
        assert entry["rank"] is None and entry["unranked"].startswith("unverified origin")
        assert entry["regrade"]["status"] == "not re-graded here"
        assert why in entry["regrade"]["label"]
    _trust(staff, bundles["origin"].public_key, "Lab A")
    entries = _entries(staff, series)
    assert [e["rank"] for _, e in entries] == [1, 2] and entries[0][1]["score"] == 30.25
    run = staff.get(f"/api/runs/{entries[0][1]['runs'][0]['id']}/").json()
    assert run["origin"]["regrade"]["why"] == why
