"""A study travels in a signed bundle (issue 45): every run of its cells, its own and the
reused cells' series, and studies/<id>/study.json, never its score; the importing master
stores it with its origin and scores it from the imported runs' grades, and the score
equals the origin's. Refused: a study.json changed after signing, one naming a series the
bundle does not hold (or not JSON, or of another suite version), with nothing stored; a
study with a run still pending is not exported."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest
from django.utils import timezone

from mlbench_master.api import models
from mlbench_master.api.models import Metric, Run, Study
from mlbench_master.bundles import layout, signing
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.shared.host_cpu import cpu_model
from mlbench_worker.shared.study_suite import SUITE_VERSION
from tests.bundles import data

pytestmark = pytest.mark.django_db

LONG_AGO = timezone.now() - dt.timedelta(hours=1)  # past the grace for late results
BASELINE = {
    "name": "baseline", "algorithms": ["allreduce"], "workloads": ["logreg-epsilon"],
    "conditions": ["unlimited"], "seeds": [1, 2], "held_out": False,
}  # fmt: skip
STUDY = {
    "name": "travelling",
    "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}}],
    "workloads": ["logreg-epsilon"],
    "conditions": ["unlimited", "10mbit"],
    "seeds": [1, 2],
}
# (algorithm, condition, variant) -> the seconds each seed's graded evaluations reach the
# target at (None: never; "cancelled": ended so, a miss).
REACH = {
    ("allreduce", "unlimited", False): (10.0, 12.0),
    ("allreduce", "10mbit", False): (20.0, 26.0),
    ("topk", "unlimited", False): (20.0, "cancelled"),
    ("topk", "10mbit", False): (15.0, 15.0),
    ("allreduce", "1gbit", True): (10.0,),
    ("topk", "1gbit", True): (30.0,),
}


@pytest.fixture(autouse=True)
def _study_settings(settings, redis_settings):
    settings.MLBENCH_MAX_WORKERS = 4
    settings.MLBENCH_MAX_CPUS = 2.0
    settings.MLBENCH_MAX_BANDWIDTH = 1000
    settings.MLBENCH_MAX_GPUS = 0


def _ended(run: Run, reach_at: float | str | None) -> None:
    """The run ended long ago, its evaluations graded by the evaluator reaching 0.8 at
    `reach_at` on the benchmark clock (tests/api/test_study_scores.py's `_ended`), on this
    machine's CPU (so a later study may reuse its cell)."""
    state = Run.CANCELLED if reach_at == "cancelled" else Run.FINISHED
    Run.objects.filter(pk=run.pk).update(
        state=state, started_at=LONG_AGO, finished_at=LONG_AGO,
        summary={"time_to_target": 1.0, "reached": True, "epochs": 2.0,
                 "comm_bytes_to_target": 1000.0, "hardware": {"cpu_model": cpu_model()}},
    )  # fmt: skip
    if state != Run.FINISHED:
        return
    reach = reach_at if isinstance(reach_at, float) else None
    evals = [(1.0, 0.4)] + ([(reach / 2, 0.5), (reach, 0.85)] if reach else [])
    for i, (seconds, accuracy) in enumerate(evals):
        meta = {"elapsed": seconds, "epoch": i + 1.0, "step": (i + 1) * 16}
        Metric.objects.create(run=run, name="val_accuracy", value=0.9, metadata=meta)
        Metric.objects.create(run=run, name=graded_name("val_accuracy"), value=accuracy,
                              metadata=meta)  # fmt: skip


def _end_all(staff, study_id: int, reach: dict) -> None:
    for cell in staff.get(f"/api/studies/{study_id}/").json()["cells"]:
        if cell["reused"]:
            continue
        times = reach[(cell["algorithm"].split(" ")[0], cell["condition"], cell["variant"])]
        runs = Run.objects.filter(series_id=cell["series"]).order_by("seed")
        for run, at in zip(runs, times, strict=False):  # a study of fewer seeds: the first
            _ended(run, at)


def _graded_study(staff) -> dict:
    """A study of two algorithms whose every run ended with grades, one cell reused from an
    earlier study (the baseline's runs travel with it); the study as the origin shows it."""
    baseline = staff.post("/api/studies/", BASELINE, format="json").json()
    _end_all(staff, baseline["id"], REACH)
    created = staff.post("/api/studies/", STUDY, format="json")
    assert created.status_code == 201, created.content
    _end_all(staff, created.json()["id"], REACH)
    return staff.get(f"/api/studies/{created.json()['id']}/").json()


def _small_study(staff) -> dict:
    """One run, ended and graded: for the refusals."""
    study = staff.post("/api/studies/", {**BASELINE, "seeds": [1]}, format="json").json()
    _end_all(staff, study["id"], REACH)
    return study


def _shown(body: dict) -> list[tuple]:
    """A study's cells as any master shows them, its ids left out."""
    return [
        (c["algorithm"], c["workload"], c["condition"], c["variant"], c["reused"], c["budget"],
         c["median"], [(r["seed"], r["state"], r["status"], r["why"], r["evaluation"],
                        r["time_to_target"]) for r in c["runs"]])
        for c in body["cells"]
    ]  # fmt: skip


def _counts() -> tuple:
    names = ("Run", "Series", "Study", "StudyCell", "Metric", "LogChunk", "RunOrigin",
             "ImportedBundle")  # fmt: skip
    return tuple(getattr(models, n).objects.count() for n in names)


def test_a_study_travels_and_is_scored_here_as_at_its_origin(installations, staff):
    origin = _graded_study(staff)
    assert origin["pending_runs"] == 0 and origin["score"] is not None
    reused = [c for c in origin["cells"] if c["reused"]]
    assert len(reused) == 1 and reused[0]["reused_from"] != origin["id"]
    signer = signing.this_installation()
    bundle = data.export(staff, f"/api/studies/{origin['id']}/bundle/")

    files, manifest = data.members(bundle), data.manifest(bundle)
    series = sorted({c["series"] for c in origin["cells"]})
    runs = sorted(Run.objects.filter(series_id__in=series).values_list("pk", flat=True))
    assert manifest["study"] == origin["id"] and manifest["series"] is None
    assert manifest["runs"] == runs and len(runs) == 10  # the reused cell's two runs too
    assert {p for p in files if p.startswith("series/")} == {
        layout.study_series_path(s) for s in series
    }
    record = json.loads(files[layout.study_path(origin["id"])])
    assert "score" not in record and record["suite_version"] == origin["suite_version"]
    assert record["algorithms"] == origin["algorithms"] and record["variants"]
    assert [(c["algorithm"], c["series"], c["reused"]) for c in record["cells"]] == [
        (c["algorithm"], c["series"], c["reused"]) for c in origin["cells"]
    ]

    installations.use("here")
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["stored"] == 10 and len(body["series"]) == 6
    [said] = body["studies"]
    assert said["new"] and said["origin_study"] == origin["id"]
    assert said["origin"] == signer.fingerprint and said["trust"] == "unverified origin"
    here = staff.get(f"/api/studies/{said['id']}/").json()
    assert here["id"] != origin["id"] and here["state"] == "ended"
    # Scored here, from the imported runs' grades: the same score and the same cells.
    assert here["score"] == origin["score"]
    assert _shown(here) == _shown(origin)
    assert {c["series"] for c in here["cells"]} == set(body["series"])
    for field in ("name", "suite_version", "algorithms", "workloads", "conditions", "seeds",
                  "num_workers", "num_cpus", "cluster", "held_out", "created_at"):  # fmt: skip
        assert here[field] == origin[field], field
    shown = here["origin"]
    assert shown["origin_study"] == origin["id"] and shown["fingerprint"] == signer.fingerprint
    assert shown["public_key"] == signer.public_key and shown["imported_by"] == "root"
    assert shown["bundle"] == body["bundle"]["digest"] and "ranks only where" in shown["standing"]
    for cell in here["cells"]:
        for run in Run.objects.filter(series_id=cell["series"]):
            assert run.origin.origin_fingerprint == signer.fingerprint

    # The same bundle again: nothing new, the study kept once.
    counts = _counts()
    again = data.post_bundle(staff, bundle)
    assert again.status_code == 200, again.json()
    assert again.json()["studies"] == [{**said, "new": False}] and _counts() == counts


def _changed(installations, bundle: bytes, study_id: int, change) -> bytes:
    """The bundle with study.json changed by `change` and listed again in the manifest,
    signed again by its origin's own key: the signature verifies; the content must not."""
    installations.use("origin")
    files = data.members(bundle)
    path = layout.study_path(study_id)
    record = json.loads(files[path])
    body = change(record)
    body = body if isinstance(body, bytes) else json.dumps(body).encode()
    manifest = json.loads(files[layout.MANIFEST])
    for member in manifest["members"]:
        if member["path"] == path:
            member.update(sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))
    signed = json.dumps(manifest).encode()
    return data.rezip({**files, path: body, layout.MANIFEST: signed,
                       layout.SIGNATURE: signing.sign(signed).encode()})  # fmt: skip


def _refused(installations, staff, body: bytes, *words: str) -> None:
    home = installations.use("here")
    counts = _counts()
    response = data.post_bundle(staff, body)
    assert response.status_code == 400, response.json()
    detail = response.json()["errors"]["bundle"][0]
    for word in words:
        assert word in detail, detail
    assert _counts() == counts and data.home_files(home) == []


def test_a_study_json_changed_after_signing_is_refused(installations, staff):
    study = _small_study(staff)
    bundle = data.export(staff, f"/api/studies/{study['id']}/bundle/")
    path = layout.study_path(study["id"])
    files = data.members(bundle)
    changed = files[path].replace(b'"name": "baseline"', b'"name": "baselinX"')
    assert changed != files[path] and len(changed) == len(files[path])
    tampered = data.rezip({**files, path: changed})
    _refused(installations, staff, tampered, path, "SHA-256", "changed after signing")
    # Its new digest listed in the manifest: the manifest's signature no longer verifies.
    manifest = json.loads(files[layout.MANIFEST])
    for member in manifest["members"]:
        if member["path"] == path:
            member["sha256"] = hashlib.sha256(changed).hexdigest()
    relisted = {**files, path: changed, layout.MANIFEST: json.dumps(manifest).encode()}
    _refused(installations, staff, data.rezip(relisted), "signature", "does not verify")


def test_a_study_json_naming_a_series_the_bundle_lacks_stores_nothing(installations, staff):
    study = _small_study(staff)
    bundle = data.export(staff, f"/api/studies/{study['id']}/bundle/")
    path = layout.study_path(study["id"])

    def elsewhere(record: dict) -> dict:
        record["cells"][0]["series"] = 999_999_999
        return record

    lacking = _changed(installations, bundle, study["id"], elsewhere)
    _refused(installations, staff, lacking, path, "series 999999999", "does not hold")
    for change, words in (
        (lambda r: b"{not json", ("is not JSON",)),
        (
            lambda r: {**r, "suite_version": "0"},
            ("suite_version '0'", f"suite version '{SUITE_VERSION}'"),
        ),
        (lambda r: {**r, "cells": []}, ("cells",)),
    ):
        _refused(installations, staff, _changed(installations, bundle, study["id"], change),
                 path, *words)  # fmt: skip
    # The bundle as signed imports.
    installations.use("here")
    assert data.post_bundle(staff, bundle).status_code == 201
    assert Study.objects.filter(origin__origin_study=study["id"]).count() == 1


def test_a_study_with_a_run_pending_is_not_exported(installations, staff):
    study = staff.post("/api/studies/", {**BASELINE, "seeds": [1]}, format="json").json()
    response = staff.get(f"/api/studies/{study['id']}/bundle/")
    assert response.status_code == 409
    assert "still pending" in response.json()["detail"] and "cancel" in response.json()["detail"]
    # Ended, but its grades may still arrive (within the grace): pending all the same.
    run = Run.objects.get(series_id=study["cells"][0]["series"])
    Run.objects.filter(pk=run.pk).update(state=Run.FINISHED, finished_at=timezone.now())
    response = staff.get(f"/api/studies/{study['id']}/bundle/")
    assert response.status_code == 409 and "waiting for its grades" in response.json()["detail"]
    assert staff.get("/api/studies/999999/bundle/").status_code == 404
    # An imported study is exported by its origin, not again from here.
    _end_all(staff, study["id"], REACH)
    bundle = data.export(staff, f"/api/studies/{study['id']}/bundle/")
    installations.use("here")
    imported = data.post_bundle(staff, bundle).json()["studies"][0]["id"]
    again = staff.get(f"/api/studies/{imported}/bundle/")
    assert again.status_code == 409 and "export it from its origin" in again.json()["detail"]
