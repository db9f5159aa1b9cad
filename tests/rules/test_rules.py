"""Rules kept in both Python and JavaScript, held to the same cases.

Four rules exist twice: which runs may be compared (the `mlbench report` table and the
dashboard's compare page), the benchmark clock (the report's accuracy-after-time and the
dashboard's charts), what a run's throughput counts (images/s, samples/s: the report,
the progress line, the run page and the compare table) and how a run's implementation is
said with its framework (the report and every page that lists runs). Their cases are data,
in comparison_cases.json, clock_cases.json, throughput_cases.json and
implementation_cases.json; every case runs against the Python functions here and against
the dashboard's own modules through node (run_js.mjs, the `js` fixture of conftest.py), and
both must give the expected answer. The New run form's rules are held to the API's in
test_form_rules.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mlbench_worker.client.cli.clock import clock_at
from mlbench_worker.client.cli.comparison import (
    _speedup,
    baseline,
    dataset_of,
    setup_differences,
    throughput_of,
)
from mlbench_worker.client.cli.formatting import implementation_text, parse_time

HERE = Path(__file__).resolve().parent
COMPARISON = json.loads((HERE / "comparison_cases.json").read_text())
CLOCK = json.loads((HERE / "clock_cases.json").read_text())
THROUGHPUT = json.loads((HERE / "throughput_cases.json").read_text())
IMPLEMENTATION = json.loads((HERE / "implementation_cases.json").read_text())
AXES = json.loads((HERE / "axes_cases.json").read_text())
TOLERANCE = 1e-3  # seconds: JavaScript dates have milliseconds, Python's microseconds


def _ids(cases: list[dict]) -> list[str]:
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    return names


# ------------------------------------------------------------------------ which runs compare


def _python_baseline(case: dict) -> dict:
    """`baseline` and `_speedup` of mlbench report, in the cases' words."""
    run = next(r for r in case["runs"] if r["id"] == case["run"])
    base, why = baseline(run, case["runs"], case.get("across_implementations", False))
    same = "no 1-worker run listed with the same "
    if why.startswith(same):
        reason: object = why[len(same) :].split("/")
    elif why == "no 1-worker run listed":
        reason = "no 1-worker run"
    else:
        reason = why or None
    speedup = None
    if base is not None:
        ratio, by, across = _speedup(run, base)
        if ratio is not None:
            how = "itself" if base is run else "throughput" if by == "throughput" else None
            speedup = {"value": round(ratio, 2), "by": how or "time to target"}
            # A cross-implementation ratio is labelled "vs <implementation>
            # (cross-implementation)": the label is part of the answer.
            label = re.search(r" vs (\S+) \(cross-implementation\)$", across)
            if label:
                speedup["across"] = label.group(1)
    return {"baseline": None if base is None else base["id"], "why": reason, "speedup": speedup}


def _same_baseline(got: dict, expected: dict) -> bool:
    if {k: got[k] for k in ("baseline", "why")} != {k: expected[k] for k in ("baseline", "why")}:
        return False
    if got["speedup"] is None or expected["speedup"] is None:
        return got["speedup"] == expected["speedup"]
    # `across`: the implementation of a cross-implementation baseline (absent otherwise).
    if got["speedup"].get("across") != expected["speedup"].get("across"):
        return False
    return got["speedup"]["by"] == expected["speedup"]["by"] and got["speedup"][
        "value"
    ] == pytest.approx(expected["speedup"]["value"], abs=0.005)  # printed with 2 decimals


DATASET_OF = COMPARISON["dataset_of"]
SETUP = COMPARISON["setup_differences"]
BASELINE = COMPARISON["baseline"]


@pytest.mark.parametrize("case", DATASET_OF, ids=_ids(DATASET_OF))
def test_dataset_of_python(case):
    assert dataset_of(case["run"]) == case["expected"]


@pytest.mark.parametrize("case", DATASET_OF, ids=_ids(DATASET_OF))
def test_dataset_of_javascript(case, js):
    assert js["dataset_of"][case["name"]] == case["expected"]


@pytest.mark.parametrize("case", SETUP, ids=_ids(SETUP))
def test_setup_differences_python(case):
    assert setup_differences(case["a"], case["b"]) == case["expected"]
    # The rule is symmetric: which run is `a` must not matter.
    assert setup_differences(case["b"], case["a"]) == case["expected"]


@pytest.mark.parametrize("case", SETUP, ids=_ids(SETUP))
def test_setup_differences_javascript(case, js):
    assert js["setup_differences"][case["name"]] == case["expected"]


@pytest.mark.parametrize("case", BASELINE, ids=_ids(BASELINE))
def test_baseline_python(case):
    got = _python_baseline(case)
    assert _same_baseline(got, case["expected"]), got


@pytest.mark.parametrize("case", BASELINE, ids=_ids(BASELINE))
def test_baseline_javascript(case, js):
    got = js["baseline"][case["name"]]
    assert _same_baseline(got, case["expected"]), got


# ------------------------------------------------------------------------ the benchmark clock


CLOCK_CASES = CLOCK["cases"]


def _close(got: float | None, expected: float | None) -> bool:
    if got is None or expected is None:
        return got is expected
    return abs(got - expected) <= TOLERANCE


@pytest.mark.parametrize("case", CLOCK_CASES, ids=_ids(CLOCK_CASES))
def test_clock_python(case):
    got = clock_at(case["elapsed"], parse_time(case["at"]))
    assert _close(got, case["expected"]), got


def _known(cases: list[dict]) -> list:
    """The cases, with those the dashboard disagrees with today marked as strict xfails."""
    return [
        pytest.param(
            c,
            id=c["name"],
            marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=c["js_disagrees"]),
        )
        if "js_disagrees" in c
        else pytest.param(c, id=c["name"])
        for c in cases
    ]


@pytest.mark.parametrize("case", _known(CLOCK_CASES))
def test_clock_javascript(case, js):
    expected = case.get("js_expected", case["expected"])
    got = js["clock"][case["name"]]
    assert _close(got, expected), f"{got} ({case.get('js_why', 'the shared rule')})"


# ------------------------------------------------------------------ what throughput counts


THROUGHPUT_CASES = THROUGHPUT["cases"]


@pytest.mark.parametrize("case", THROUGHPUT_CASES, ids=_ids(THROUGHPUT_CASES))
def test_throughput_python(case):
    series = set(case.get("series", []))
    metric, unit = throughput_of(case["run"], lambda m: m in series)
    assert {"metric": metric, "unit": unit} == case["expected"]


@pytest.mark.parametrize("case", THROUGHPUT_CASES, ids=_ids(THROUGHPUT_CASES))
def test_throughput_javascript(case, js):
    assert js["throughput"][case["name"]] == case["expected"]


# ------------------------------------------------------------------- axis ranges (JS only)


AXES_CASES = [(f"{kind}: {c['name']}", c["expected"]) for kind in ("clock", "fraction")
              for c in AXES[kind]]  # fmt: skip


@pytest.mark.parametrize(("name", "expected"), AXES_CASES, ids=[n for n, _ in AXES_CASES])
def test_axis_ranges_javascript(name, expected, js):
    assert js["axes"][name] == pytest.approx(expected), name


# ------------------------------------------------------- an implementation and its framework


IMPLEMENTATION_CASES = IMPLEMENTATION["cases"]


@pytest.mark.parametrize("case", IMPLEMENTATION_CASES, ids=_ids(IMPLEMENTATION_CASES))
def test_implementation_text_python(case):
    assert implementation_text(case["run"]) == case["expected"]


@pytest.mark.parametrize("case", IMPLEMENTATION_CASES, ids=_ids(IMPLEMENTATION_CASES))
def test_implementation_text_javascript(case, js):
    assert js["implementation_text"][case["name"]] == case["expected"]
