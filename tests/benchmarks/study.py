"""`make study`: an algorithm study on the running master, measured (issue 45,
docs/results.rst "An algorithm study").

By default the issue's measurement: allreduce, PowerSGD, top-k, signSGD, local SGD,
decentralized SGD and DiLoCo, each at its catalogue defaults, over the suite's three
workloads at two conditions (unlimited and 10 Mbit/s), one seed, with the held-out variants.
It queues the study through POST /api/studies/ (the master checks it whole, draws the
variants and runs every cell on its driver), waits until nothing is pending, and writes the
study as the API answers it, its wall time and each run's, the machine, and a projection of
what the full suite (five conditions) would take from the measured runs, to
bench-results/study-<id>.json and .md. The numbers are the master's (graded by its
evaluator, scored by mlbench_master/results/study_score.py); this script computes none of
the score, only the time it took.

Usage (a master must be up: `make study` starts one):
  python tests/benchmarks/study.py [--algorithms a,b] [--workloads w] [--conditions c]
      [--seeds 1,2] [--name NAME] [--no-reuse]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import RESULTS_DIR, machine, markdown_table  # noqa: E402

from mlbench_worker.client.api import default_token, default_url  # noqa: E402
from mlbench_worker.shared import study_suite  # noqa: E402

ALGORITHMS = "allreduce,powersgd,topk,signsgd,localsgd,decentralized,diloco"


def _api(method: str, path: str, **kw) -> dict:
    url, token = default_url(), default_token()
    if not url:
        sys.exit("no master: start one with `mlbench up` (make study does)")
    response = requests.request(
        method, url + path, headers={"Authorization": f"Token {token}"}, timeout=60, **kw
    )
    if response.status_code >= 400:
        sys.exit(f"{method} {path}: HTTP {response.status_code}: {response.text[:2000]}")
    return response.json()


def _run_seconds(run_id: int) -> float | None:
    run = _api("GET", f"/api/runs/{run_id}/")
    started, ended = run.get("started_at"), run.get("finished_at")
    if not (started and ended):
        return None
    from mlbench_master.common.dates import parse_iso_datetime

    return (parse_iso_datetime(ended) - parse_iso_datetime(started)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", default=ALGORITHMS)
    parser.add_argument("--workloads", default=",".join(study_suite.WORKLOADS))
    parser.add_argument("--conditions", default="unlimited,10mbit")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--name", default="make study")
    parser.add_argument("--no-reuse", action="store_true")
    args = parser.parse_args()
    body = {
        "name": args.name,
        "algorithms": args.algorithms.split(","),
        "workloads": args.workloads.split(","),
        "conditions": args.conditions.split(","),
        "seeds": [int(s) for s in args.seeds.split(",")],
        "reuse": not args.no_reuse,
    }
    begun = time.monotonic()
    study = _api("POST", "/api/studies/", json=body)
    print(f"study {study['id']}: {study['runs']['total']} runs queued", flush=True)
    while study["pending_runs"] or study["score"] is None:
        time.sleep(20)
        study = _api("GET", f"/api/studies/{study['id']}/")
        print(f"  {study['runs']['ended']}/{study['runs']['total']} runs ended", flush=True)
    wall = time.monotonic() - begun
    seconds = {r["id"]: _run_seconds(r["id"]) for c in study["cells"] for r in c["runs"]}
    measured = [s for s in seconds.values() if s is not None]
    per_condition = len(measured) / max(1, len(body["conditions"]) + 1)
    full = sum(measured) / max(1, len(body["conditions"]) + 1) * (len(study_suite.CONDITIONS) + 1)
    rows = [
        [algo, *(round(study["score"]["by_condition"][c][algo], 4) for c in body["conditions"]),
         round(study["score"]["overall"][algo], 4)]
        for algo in (a["label"] for a in study["algorithms"])
    ]  # fmt: skip
    headers = ["algorithm", *body["conditions"], "overall"]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    name = f"study-{study['id']}"
    payload = {
        "study": study, "wall_seconds": wall, "run_seconds": seconds, "machine": machine(),
        "runs_per_condition": per_condition, "full_suite_seconds_projected": full,
    }  # fmt: skip
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    text = (
        f"## Study {study['id']} (suite {study['suite_version']})\n\n{markdown_table(headers, rows)}"
        f"\n\n{len(measured)} runs, {wall / 60:.1f} min wall; the runs themselves "
        f"{sum(measured) / 60:.1f} min; all five conditions would take about {full / 60:.0f} min "
        f"(the measured runs per condition, held-out variants once).\n"
    )
    (RESULTS_DIR / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
