"""A run carried to another master costs the same there, to the cent: the bundle carries the
nodes its launch recorded (run.json's `nodes`) beside the prices it copied, and this master
prices them with the same function (results/cost.py). For one run and for a series, in the
run's answer, the series' statistics and on the board. A bundle made before `nodes` says why
its runs' cost is unknown. The command line (`mlbench show`, `mlbench report`):
tests/client/test_imported_cost_cli.py."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mlbench_master.api.models import ImportedBundle, Run, Series
from mlbench_master.bundles import layout, signing, trust
from mlbench_master.cluster import node_kinds
from mlbench_master.results.statistics import for_series
from mlbench_master.runs import lifecycle
from tests.bundles import data
from tests.bundles.test_trust import public_of
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db

TASK = "logreg-epsilon"
EVALS = [(10.0, 0.6, 1.0), (20.0, 0.85, 2.0), (30.0, 0.9, 3.0)]  # target 0.8 reached at 20 s
NODES = node_kinds.kubernetes_nodes(
    ["node-a", "node-a", "node-b"], {"node.kubernetes.io/instance-type": "n1-standard-4"}
)


def _prices(staff) -> None:
    for kind, per_hour in (("n1-standard-4", "0.19"), ("node-b", "0.5"), ("local", "0.07")):
        body = {"node_kind": kind, "price_per_hour": per_hour, "currency": "USD",
                "source": "https://example.org/prices", "as_of": "2026-11-01"}  # fmt: skip
        assert staff.post("/api/prices/", body, format="json").status_code == 201


def _board_entry(staff, run_ids: set[int]) -> dict:
    """The board's entry holding exactly `run_ids`."""
    board = staff.get("/api/results/").json()
    found = [
        e
        for section in board["sections"]
        for e in section["entries"]
        if {r["id"] for r in e["runs"]} == run_ids
    ]
    assert len(found) == 1, (run_ids, board)
    return found[0]


def _cost_of(entry: dict) -> dict:
    cost = entry["cost"]
    return {**cost, "not_priced": [{**r, "run": None} for r in cost.get("not_priced") or []]}


def test_an_imported_run_costs_what_it_cost_at_its_origin(installations, staff):
    _prices(staff)
    run = Maker(staff).run(None, 1, 3, EVALS, task=TASK, nodes=NODES, seconds=123.0)
    origin_cost = staff.get(f"/api/runs/{run.pk}/").json()["cost"]
    assert origin_cost["priced"] is True and origin_cost["to_target"]["seconds"] == 20.0
    origin_entry = _cost_of(_board_entry(staff, {run.pk}))
    assert origin_entry["cost_to_target"] is not None
    bundle = data.export(staff, f"/api/runs/{run.pk}/bundle/")
    record = json.loads(data.members(bundle)[f"runs/{run.pk}/run.json"])
    assert record["nodes"] == NODES  # what cost.py reads travels, signed with the rest
    key = signing.this_installation().public_key
    Run.objects.filter(pk=run.pk).delete()  # as if on another master

    installations.use("here")
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 201, answer.json()
    copy = answer.json()["runs"][0]["id"]
    assert staff.get(f"/api/runs/{copy}/").json()["cost"] == origin_cost
    trust.add(key, "the origin", None)  # ranked as the origin's own was
    assert _cost_of(_board_entry(staff, {copy})) == origin_entry


def test_an_imported_series_costs_what_it_cost_at_its_origin(installations, staff):
    _prices(staff)
    maker = Maker(staff)
    series = maker.series(task=TASK, seeds=[1, 2], worker_counts=[1, 2])
    runs = [
        maker.run(
            series,
            seed,
            w,
            EVALS,
            task=TASK,
            nodes=node_kinds.local_nodes(w),
            seconds=60.0 + 7 * seed + w,
        )  # fmt: skip
        for seed in (1, 2)
        for w in (1, 2)
    ]
    before = data.without_run_ids(for_series(series))
    assert before["cost"] and not before["cost"]["not_priced"]
    costs = [staff.get(f"/api/runs/{r.pk}/").json()["cost"] for r in runs]
    entries = [_cost_of(_board_entry(staff, {r.pk for r in runs if r.num_workers == w}))
               for w in (1, 2)]  # fmt: skip
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    key = signing.this_installation().public_key
    Series.objects.filter(pk=series.pk).delete()
    Run.objects.filter(pk__in=[r.pk for r in runs]).delete()

    installations.use("here")
    body = data.post_bundle(staff, bundle).json()
    copy = Series.objects.get(pk=body["series"][0])
    assert data.without_run_ids(for_series(copy)) == before
    copies = list(copy.runs.order_by("id"))
    assert [staff.get(f"/api/runs/{r.pk}/").json()["cost"] for r in copies] == costs
    trust.add(key, "the origin", None)
    assert [_cost_of(_board_entry(staff, {r.pk for r in copies if r.num_workers == w}))
            for w in (1, 2)] == entries  # fmt: skip


def _without_nodes(bundle: bytes, key: Ed25519PrivateKey) -> bytes:
    """`bundle` as an mlbench before `nodes` wrote it, signed again by `key`."""
    files = data.members(bundle)
    manifest = json.loads(files[layout.MANIFEST])
    for member in manifest["members"]:
        if member["path"].endswith("run.json"):
            record = json.loads(files[member["path"]])
            assert record.pop("nodes")
            body = json.dumps(record).encode()
            files[member["path"]] = body
            member.update(sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))
    manifest["origin"] = {**manifest["origin"], "public_key": public_of(key)}
    body = json.dumps(manifest).encode()
    files[layout.MANIFEST] = body
    files[layout.SIGNATURE] = base64.b64encode(key.sign(body))
    return data.rezip(files)


def test_a_bundle_made_before_nodes_imports_and_says_why_its_cost_is_unknown(installations, staff):
    _prices(staff)
    run = Maker(staff).run(None, 1, 1, EVALS, task=TASK, nodes=node_kinds.local_nodes(1))
    older = _without_nodes(
        data.export(staff, f"/api/runs/{run.pk}/bundle/"), Ed25519PrivateKey.generate()
    )
    installations.use("here")
    answer = data.post_bundle(staff, older)
    assert answer.status_code == 201, answer.json()
    cost = staff.get(f"/api/runs/{answer.json()['runs'][0]['id']}/").json()["cost"]
    assert cost["priced"] is False
    assert "imported from a bundle made before bundles carried a run's nodes" in cost["reason"]


def test_a_launch_that_recorded_no_nodes_travels_as_such(installations, staff):
    _prices(staff)
    # Made as the master makes runs (it copies the price table), ended before its launch.
    run = lifecycle.new_run({"name": "never launched", "task": TASK}, None, Run.QUEUED)
    Run.objects.filter(pk=run.pk).update(state=Run.CANCELLED)
    bundle = data.export(staff, f"/api/runs/{run.pk}/bundle/")
    assert json.loads(data.members(bundle)[f"runs/{run.pk}/run.json"])["nodes"] is None
    Run.objects.filter(pk=run.pk).delete()
    installations.use("here")
    copy = data.post_bundle(staff, bundle).json()["runs"][0]["id"]
    reason = staff.get(f"/api/runs/{copy}/").json()["cost"]["reason"]
    assert reason.startswith("not priced:") and "recorded no nodes" in reason
    assert ImportedBundle.objects.count() == 1
