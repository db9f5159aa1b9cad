"""Runs of a series imported one bundle at a time, in any order, and then the series make
the same series here as the series imported at once: its runs, its groups, its statistics
and its place on the board. A run that arrives after its series joins it. Also: a bundle
repacked with `zip -r` (folder entries) imports, while every path check stays."""

from __future__ import annotations

import io
import random
import subprocess
import zipfile

import pytest

from mlbench_master.api.models import ImportedBundle, Run, Series
from mlbench_master.bundles import signing, trust
from mlbench_master.results.statistics import for_series
from tests.bundles import data
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db

TASK = "logreg-epsilon"


def _evals(reach_at: float) -> list[tuple[float, float, float]]:
    return [(reach_at / 2, 0.5, 1.0), (reach_at, 0.85, 2.0), (reach_at + 10, 0.86, 3.0)]


def _origin_series(staff) -> tuple[Series, list[Run]]:
    """Six ended runs: seeds 1-3 on 1 and 2 workers, each reaching the target at its own
    time."""
    maker = Maker(staff)
    series = maker.series(task=TASK, seeds=[1, 2, 3], worker_counts=[1, 2])
    runs = [
        maker.run(series, seed, w, _evals(20.0 + 5 * seed + w), task=TASK, dataset="epsilon")
        for seed in (1, 2, 3)
        for w in (1, 2)
    ]
    return series, runs


def _board(staff, series_id: int) -> list[dict]:
    """The board's entries of series `series_id`, run ids left out and its runs by seed:
    this master's ids (and so their order) depend on the order the runs arrived in."""
    board = staff.get("/api/results/").json()
    out = []
    for section in board["sections"]:
        for e in section["entries"]:
            if e["series"] == series_id:
                cost = e["cost"]
                cost = {**cost, "not_priced": [{**r, "run": None} for r in cost["not_priced"]]}
                out.append({
                    "section": section["label"],
                    "workers": e["workers"], "seeds": e["seeds"], "rank": e["rank"],
                    "score": e["score"], "unranked": e["unranked"], "cost": cost,
                    "statistics": data.without_run_ids(e["statistics"])
                    if "curves" in e["statistics"] else e["statistics"],
                    "runs": sorted(({**r, "id": None} for r in e["runs"]), key=lambda r: r["seed"]),
                })  # fmt: skip
    return sorted(out, key=lambda e: e["workers"])


def _said(staff, series: Series) -> dict:
    """What this master says of an imported series: its runs by origin, its statistics, its
    groups on the board."""
    runs = sorted(series.runs.values_list("origin__origin_run", "num_workers", "seed"))
    return {
        "runs": runs,
        "statistics": data.without_run_ids(for_series(series)),
        "board": _board(staff, series.pk),
    }


def _forget(series_id: int) -> None:
    """This master's copies gone (a staff user may delete imported runs), to import again."""
    Run.objects.filter(series_id=series_id).delete()
    Run.objects.filter(origin__isnull=False).delete()
    Series.objects.filter(pk=series_id).delete()
    ImportedBundle.objects.all().delete()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_first_in_any_order_then_the_series_equal_the_series_at_once(
    installations, staff, seed
):
    series, runs = _origin_series(staff)
    ids = [r.pk for r in runs]
    whole = data.export(staff, f"/api/series/{series.pk}/bundle/")
    three = data.export(staff, f"/api/runs/bundle/?runs={ids[1]},{ids[2]},{ids[3]}")
    singles = {i: data.export(staff, f"/api/runs/{i}/bundle/") for i in (ids[0], ids[4])}
    key = signing.this_installation().public_key
    Series.objects.filter(pk=series.pk).delete()
    Run.objects.filter(pk__in=ids).delete()  # as if on another master

    installations.use("here")
    trust.add(key, "the origin", None)
    answer = data.post_bundle(staff, whole)
    assert answer.status_code == 201
    at_once = _said(staff, Series.objects.get(pk=answer.json()["series"][0]))
    assert len(at_once["runs"]) == 6 and at_once["board"][0]["rank"] is not None
    _forget(answer.json()["series"][0])

    parts = [three, *singles.values()]
    random.Random(seed).shuffle(parts)
    for part in parts:
        assert data.post_bundle(staff, part).status_code == 201
    assert not Series.objects.exists()  # no series arrived yet
    answer = data.post_bundle(staff, whole)
    assert answer.status_code == 201 and answer.json()["stored"] == 1  # ids[5] only
    (series_here,) = answer.json()["series"]
    assert Run.objects.filter(series=None).count() == 0  # every run joined
    assert _said(staff, Series.objects.get(pk=series_here)) == at_once


def test_a_run_that_arrives_after_its_series_joins_it(installations, staff):
    series, runs = _origin_series(staff)
    whole = data.export(staff, f"/api/series/{series.pk}/bundle/")
    single = data.export(staff, f"/api/runs/{runs[2].pk}/bundle/")
    Series.objects.filter(pk=series.pk).delete()
    Run.objects.filter(pk__in=[r.pk for r in runs]).delete()
    installations.use("here")
    series_here = Series.objects.get(pk=data.post_bundle(staff, whole).json()["series"][0])
    before = _said(staff, series_here)
    # A staff user deletes one of its runs; imported again on its own, it rejoins.
    assert staff.delete(f"/api/runs/{series_here.runs.order_by('id')[2].pk}/").status_code == 204
    assert series_here.runs.count() == 5
    answer = data.post_bundle(staff, single)
    assert answer.status_code == 201 and answer.json()["stored"] == 1
    assert Run.objects.get(pk=answer.json()["runs"][0]["id"]).series_id == series_here.pk
    assert _said(staff, series_here) == before


def _zip_r(bundle: bytes, tmp_path) -> bytes:
    """`bundle` unpacked and packed again with `zip -r`, which lists every folder."""
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        zf.extractall(folder)
    out = tmp_path / "repacked.zip"
    subprocess.run(["zip", "-q", "-r", str(out), "."], cwd=folder, check=True)
    return out.read_bytes()


def test_a_bundle_repacked_with_zip_r_imports(installations, staff, tmp_path):
    series, runs = _origin_series(staff)
    bundle = data.export(staff, f"/api/series/{series.pk}/bundle/")
    repacked = _zip_r(bundle, tmp_path)
    with zipfile.ZipFile(io.BytesIO(repacked)) as zf:
        assert "runs/" in zf.namelist()  # what `zip -r` adds
    installations.use("here")
    answer = data.post_bundle(staff, repacked)
    assert answer.status_code == 201, answer.json()
    assert answer.json()["stored"] == 6


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        ("../", "climbs out"),
        ("runs/../../", "climbs out"),
        ("/etc/", "is absolute"),
        ("runs//", "climbs out"),
        ("runs/", "twice"),  # listed once already by the repack
    ],
)
def test_folder_entries_keep_every_path_check(installations, staff, tmp_path, folder, said):
    series, runs = _origin_series(staff)
    repacked = _zip_r(data.export(staff, f"/api/series/{series.pk}/bundle/"), tmp_path)
    buffer = io.BytesIO(repacked)
    with zipfile.ZipFile(buffer, "a") as zf:
        info = zipfile.ZipInfo(folder)
        info.external_attr = (0o40755 << 16) | 0x10
        zf.writestr(info, b"")
    installations.use("here")
    answer = data.post_bundle(staff, buffer.getvalue())
    assert answer.status_code == 400 and said in str(answer.json()), answer.json()
    assert not Run.objects.filter(origin__isnull=False).exists()


def test_a_folder_entry_holding_data_is_refused(installations, staff, tmp_path):
    series, runs = _origin_series(staff)
    files = data.members(data.export(staff, f"/api/series/{series.pk}/bundle/"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, body in files.items():
            zf.writestr(name, body)
        info = zipfile.ZipInfo("runs/")
        info.external_attr = (0o40755 << 16) | 0x10
        zf.writestr(info, b"hidden")
    installations.use("here")
    answer = data.post_bundle(staff, buffer.getvalue())
    assert answer.status_code == 400 and "'runs/'" in str(answer.json()), answer.json()
