"""MLPerf-format logs read and checked as a reader would: the `:::MLLOG` lines parsed, and
MLCommons' compliance checker run as the command docs/checking.rst gives.

`check_run_log` holds a stored run's log to what the master serves about the same run
(its evaluations, graded where graded, and its time to target), so the tests that make
runs with the real worker through a live master check the log of each such run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from mlbench_master.results import mllog
from mlbench_worker.shared import catalogue

PREFIX = ":::MLLOG "


def events(text: str) -> list[dict[str, Any]]:
    """The log's events in order, as MLCommons' mllog wrote them."""
    return [
        json.loads(line[len(PREFIX) :]) for line in text.splitlines() if line.startswith(PREFIX)
    ]


def check(task: str, text: str, folder: Path) -> subprocess.CompletedProcess:
    """Run MLCommons' checker the way docs/checking.rst tells a reader to."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "result_0.txt"
    log.write_text(text)
    return subprocess.run(
        [sys.executable, *mllog.checker_command(task, str(log))[1:]],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=120,
    )


def check_run_log(get: Callable[..., requests.Response], run_id: int, folder: Path) -> dict:
    """The run's log (GET /api/runs/<id>/mllog/, through `get(path, params=...)` of a live
    master) shows exactly the evaluations the results use up to the one that reached the
    target (all of them when none did), stops there with "success" (else "aborted" at
    the last), its run_stop - run_start is the run's time to target, and MLCommons'
    checker accepts it exactly when the target was reached. Returns what it read."""
    run = get(f"/api/runs/{run_id}/").json()
    graded = run["evaluation"]["status"] == "evaluated"
    goal = catalogue.get(run["task"]).goal(run["target"])  # task 3's: perplexity, from above
    name = "evaluated_val_accuracy" if graded else goal.metric
    params = {"metric_type": "run", "metric_filter": name, "details": 1}
    body = get(f"/api/metrics/{run_id}/", params=params).json()
    evaluations = [(float(p["metadata"]["elapsed"]), float(p["value"])) for p in body[name]]
    said = (run.get("summary") or {}).get("time_to_target")
    ttt = run["evaluation"]["time_to_target"] if graded else said
    shown = [e for e in evaluations if ttt is None or e[0] <= ttt]
    response = get(f"/api/runs/{run_id}/mllog/")
    assert response.status_code == 200, response.text
    text = response.text
    lines = events(text)
    logged = [e for e in lines if e["key"] == "eval_accuracy"]
    assert [e["value"] for e in logged] == [acc for _, acc in shown], (evaluations, ttt, text)
    (start,) = [e["time_ms"] for e in lines if e["key"] == "run_start"]
    (stop,) = [e for e in lines if e["key"] == "run_stop"]
    (target,) = [e["value"] for e in lines if e["key"] == mllog.TARGET_KEY]
    if ttt is not None:
        assert stop["metadata"]["status"] == "success", text
        assert stop["time_ms"] - start == pytest.approx(1000 * ttt, abs=0.01)
        # The evaluation that reached it is logged, at run_stop, and reaches the target.
        assert logged and logged[-1]["time_ms"] == stop["time_ms"], text
        assert goal.reached(logged[-1]["value"]) and goal.value == target
        (direction,) = [e["value"] for e in lines if e["key"] == mllog.DIRECTION_KEY]
        assert direction == goal.direction
    else:
        assert stop["metadata"]["status"] == "aborted", text
        assert stop["time_ms"] - start == pytest.approx(1000 * shown[-1][0], abs=0.01)
    checked = check(run["task"], text, folder / f"run-{run_id}")
    assert (checked.returncode == 0) == (ttt is not None), checked.stdout + checked.stderr
    return {"text": text, "events": lines, "time_to_target": ttt, "evaluations": evaluations}
