"""Closed-division results checked against the reference's convergence (convergence.py):
every case is also run through mlperf_logging's own RCP checker, from result files and an
RCP file written here, and the two must agree; then stored series through the API."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from mlbench_master.api.models import Run
from mlbench_master.results import convergence
from tests.bundles import data

BS = 256
# Ten reference runs' epochs to target (MLPerf's rule needs ten): RCP mean 8.5.
REFERENCE = [7.0, 7.0, 8.0, 8.0, 8.0, 9.0, 9.0, 9.0, 10.0, 10.0]
WIDE = [20.0, 22.0, 25.0, 25.0, 26.0, 28.0, 30.0, 31.0, 33.0, 40.0]


def _log(epochs: float | None) -> str:
    """A result file as rcp_checker reads one: converged at `epochs`, or aborted."""
    lines = [
        {"key": "submission_benchmark", "value": "resnet", "metadata": {}},
        {"key": "global_batch_size", "value": BS, "metadata": {}},
        {"key": "eval_accuracy", "value": 0.8, "metadata": {"epoch_num": epochs or 99.0}},
        {"key": "run_stop", "value": None,
         "metadata": {"status": "aborted" if epochs is None else "success"}},
    ]  # fmt: skip
    return "".join(f":::MLLOG {json.dumps(line)}\n" for line in lines)


def _library(tmp: Path, epochs: list[float | None], reference: list[float]) -> tuple:
    """rcp_checker's own verdict (check_directory, as its command line runs it)."""
    folder = tmp / "results"
    folder.mkdir()
    for i, e in enumerate(epochs):
        (folder / f"result_{i}.txt").write_text(_log(e))
    rcps = tmp / "rcps.json"
    record = {"Benchmark": "resnet", "BS": BS, "Hyperparams": {}, "Epochs to converge": reference}
    rcps.write_text(json.dumps({"ref": record}))
    with rcps.open() as f:
        return rcp_checker.check_directory(
            str(folder), "training", "4.0.0", False, False, rcp_file=f, rcp_pass="full_rcps"
        )


@pytest.mark.parametrize(
    ("epochs", "reference", "status"),
    [
        ([3.0, 3.0, 4.0, 4.0, 4.0], REFERENCE, "flagged"),  # clearly faster
        ([None, 3.0, 3.0, 4.0, 4.0], REFERENCE, "flagged"),  # one miss, still faster
        ([7.0, 8.0, 8.0, 8.0, 9.0], REFERENCE, "passed"),  # within noise (normalized)
        ([9.0, 10.0, 10.0, 11.0, 12.0], REFERENCE, "passed"),  # slower
        ([7.0, 8.0, 8.0, 8.0, None], REFERENCE, "passed"),
        ([18.0, 19.0, 20.0, 21.0, 22.0], WIDE, "flagged"),
        ([20.0, 21.0, 24.0, 25.0, 30.0], WIDE, "passed"),
    ],
)
def test_the_flag_is_rcp_checkers_verdict(tmp_path, epochs, reference, status):
    ours = convergence.check(epochs, reference, BS)
    passed, message, norm = _library(tmp_path, epochs, reference)

    assert ours["status"] == status
    assert message == "RCP found"
    assert ours["flagged"] is (not passed)
    assert ours["norm_factor"] == pytest.approx(norm)


@pytest.mark.parametrize("offset", [-0.01, 0.01])
def test_either_side_of_the_min_epochs_bound(tmp_path, offset):
    bound = convergence.reference_point(REFERENCE, BS)["min_epochs"]
    x = round(bound + offset, 3)
    epochs = [x - 1, x, x, x, x + 1]  # olympic mean x
    ours = convergence.check(epochs, REFERENCE, BS)
    passed, _, _ = _library(tmp_path, epochs, REFERENCE)

    assert ours["olympic_mean_epochs"] == pytest.approx(x)
    assert ours["flagged"] is (offset < 0) is (not passed)


def test_the_reference_point_is_rcp_checkers_on_its_own_rcp_file():
    """MLPerf's published RCPs for ResNet, read by the library itself, give the same mean,
    stdev and min epochs as ours from the same epochs."""
    library = rcp_checker.RCP_Checker("training", "4.0.0", "resnet", False)
    for record in library.rcp_data.values():
        ours = convergence.reference_point(record["Epochs to converge"], record["BS"])
        assert ours["mean"] == pytest.approx(record["RCP Mean"])
        assert ours["stdev"] == pytest.approx(record["RCP Stdev"])
        assert ours["min_epochs"] == pytest.approx(record["Min Epochs"])
        assert ours["max_speedup"] == pytest.approx(record["Max Speedup"])


def test_two_runs_that_missed_are_insufficient_convergence_as_the_library_says(tmp_path):
    epochs = [None, None, 3.0, 3.0, 4.0]
    ours = convergence.check(epochs, REFERENCE, BS)
    passed, message, _ = _library(tmp_path, epochs, REFERENCE)

    assert (passed, message) == (False, "Insufficient convergence")
    assert ours["status"] == "not checked" and not ours["flagged"]
    assert "insufficient convergence" in ours["reason"]


def test_fewer_runs_than_the_rule_needs_are_not_checked():
    assert convergence.RUNS == rcp_checker.submission_runs["training"]["resnet"] == 5
    few = convergence.check([3.0, 3.0, 4.0, 4.0], REFERENCE, BS)
    assert few["status"] == "not checked" and not few["flagged"]
    assert few["reason"] == "4 runs ended; MLPerf's rule needs 5"
    assert few["reference"]["mean"] == pytest.approx(8.5)  # the reference is still shown

    thin = convergence.check([3.0, 3.0, 4.0, 4.0, 4.0], REFERENCE[:9], BS)
    assert thin["status"] == "not checked" and not thin["flagged"]
    assert thin["reason"] == "the reference has 9 runs that reached the target; MLPerf's rule needs 10"  # fmt: skip


# Stored series through the API: task 2 (light goal 80 %), graded by the evaluator.


def _series_runs(maker, seeds, epochs, implementation, reported=None):
    """A series of 1-worker runs, each graded at 80 % first at its epochs (`reported`: the
    epochs at which each run says it got there, its own word, else the same)."""
    series = maker.series(seeds=list(seeds), worker_counts=[1])
    for seed, e, said in zip(seeds, epochs, reported or epochs, strict=True):
        evals = [(10.0 * k, 0.9 if k >= said else 0.5, float(k)) for k in range(1, 13)]
        graded = [0.9 if k >= e else 0.5 for k in range(1, 13)]
        run = maker.run(series, seed, 1, evals, graded=graded)
        Run.objects.filter(pk=run.pk).update(implementation=implementation)
    return series


def _entry(api, series) -> dict:
    board = api.get("/api/results/", {"task": "logreg-epsilon"}).json()
    found = [e for s in board["sections"] for e in s["entries"] if e["series"] == series.pk]
    assert len(found) == 1
    return found[0]


@pytest.mark.django_db
def test_a_series_faster_than_the_reference_is_flagged_on_the_board(maker, api):
    reference = _series_runs(maker, range(1, 11), [7, 7, 8, 8, 8, 9, 9, 9, 10, 10], "reference")
    fast = _series_runs(maker, range(11, 16), [3, 3, 4, 4, 4], "spark")
    slow = _series_runs(maker, range(21, 26), [7, 8, 8, 8, 9], "spark")

    flagged = _entry(api, fast)["convergence"]
    assert flagged["status"] == "flagged" and flagged["flagged"] is True
    assert flagged["epochs"] == [3, 3, 4, 4, 4]
    assert flagged["reference"]["series"] == reference.pk
    assert flagged["reference"]["mean"] == pytest.approx(8.5)
    assert flagged["reference"]["min_epochs"] == pytest.approx(
        convergence.reference_point(REFERENCE, 128)["min_epochs"]
    )
    assert _entry(api, slow)["convergence"]["status"] == "passed"
    assert _entry(api, reference)["convergence"]["status"] == "reference"


@pytest.mark.django_db
def test_the_series_bundle_carries_the_flag_with_its_statistic(maker, api, settings, tmp_path):
    """The series record in the bundle holds the exporting master's check per worker count,
    as the board shows it, so a reader of the bundle alone sees the flag."""
    settings.MLBENCH_HOME = tmp_path
    _series_runs(maker, range(1, 11), [7, 7, 8, 8, 8, 9, 9, 9, 10, 10], "reference")
    fast = _series_runs(maker, range(11, 16), [3, 3, 4, 4, 4], "spark")
    body = data.export(api, f"/api/series/{fast.pk}/bundle/")
    with zipfile.ZipFile(io.BytesIO(body)) as bundle:
        record = json.loads(bundle.read("series.json"))
    carried = record["convergence"]["1"]
    assert carried["status"] == "flagged" and carried["epochs"] == [3, 3, 4, 4, 4]
    assert carried["reference"]["min_epochs"] == pytest.approx(
        convergence.reference_point(REFERENCE, 128)["min_epochs"]
    )
    assert carried == json.loads(json.dumps(_entry(api, fast)["convergence"]))


@pytest.mark.django_db
def test_epochs_come_from_the_grades_not_the_runs_word(maker, api):
    _series_runs(maker, range(1, 11), [7, 7, 8, 8, 8, 9, 9, 9, 10, 10], "reference")
    # Each run says it reached 80 % at epoch 1; the evaluator's grades say epoch 8.
    claims = _series_runs(maker, range(11, 16), [8] * 5, "spark", reported=[1] * 5)

    found = _entry(api, claims)["convergence"]
    assert found["status"] == "passed"
    assert found["epochs"] == [8, 8, 8, 8, 8]


@pytest.mark.django_db
def test_no_reference_series_says_so(maker, api):
    # The only series is of another implementation: there is no reference to check against.
    alone = _series_runs(maker, range(1, 6), [3, 3, 4, 4, 4], "spark")

    found = _entry(api, alone)["convergence"]
    assert found["status"] == "not checked" and not found["flagged"]
    assert found["reason"].startswith("no reference series for logreg-epsilon")
    assert found["reference"] is None


def test_one_run_reads_as_one_run():
    assert convergence.check([3.0], REFERENCE, BS)["reason"] == "1 run ended; MLPerf's rule needs 5"
