"""Equivalence harness for the master's regroup (issue 43): the same runs on two checkouts.

Record what one checkout does::

    python -m tests.equivalence.master_behaviour --tree /tmp/eq-old --out old.json
    python -m tests.equivalence.master_behaviour --tree /tmp/eq-new --out new.json
    python -m tests.equivalence.master_behaviour --tree /tmp/eq-new --out new2.json

and compare, with the two records of the same tree telling what varies by itself::

    python -m tests.equivalence.master_behaviour --compare old.json new.json \\
        --noise new.json new2.json

Run it from a checkout holding this harness, with the project's venv (`.venv/bin/python`);
`--tree` is the checkout whose code runs (make one with `git worktree add /tmp/eq-old
<commit>`). Its master (`python -m mlbench_master up`, the embedded master with Redis, RQ
workers, collector and web server) runs with cwd=TREE and PYTHONPATH=TREE first, on a
throwaway PostgreSQL (tests/services.postgres_server), so the tree's own master, worker
and `mlbench` CLI code runs. The script (script.py) then, over HTTP and the CLI:

- runs every task once, tiny, fixed seed, 2 workers, generated data, bounded by epochs:
  ResNet-20 with the reference loop, torch DDP, TensorFlow and PowerSGD; logistic
  regression with the reference loop and Spark (TensorFlow and Spark only where the
  workers can import them: GET /api/runs/defaults/ says); AWD-LSTM and GPT (tiny models
  as task-named custom commands, as tests/e2e does); the communication benchmark; a
  failing custom command; a series of 2 seeds x 2 worker counts;
- cancels a checkpointing run after its first checkpoint and resumes it;
- exports a run, a series and several runs as bundles and imports them into a second
  master (and damaged, foreign-format and own bundles into the first);
- waits for every model audit and grade, and records each run's final state, summary,
  evaluation, metric series, predictions list, model, worker command line;
- records error answers: bad fields (400), unknown ids (404), missing, wrong and
  non-staff tokens (401, 403), a busy master (409), damaged uploads;
- records `mlbench runs/show/report/series` output.

Runs asked by their task fields keep the master's own worker command; only the data size
the worker trains on is shrunk (shim/sitecustomize.py, as tests/e2e/test_resume.py patches
worker_argv). Normalization (normalize.py) turns wall-clock values into "present"
placeholders and tokens, keys, ports, paths and hosts into stable ones. The compare mode
prints every difference and exits 1 when any is found; keys only the new record has are
listed as additions, not failures; paths that differ between the two --noise records are
excluded and listed. About 10 minutes a tree on a 2-core machine. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def errors(rec: Any, user_token: str) -> dict[str, Any]:  # noqa: ANN401
    """Answers to requests that must be refused, each as {status, body}."""
    m = rec.m
    ref, logreg = rec.ids["resnet-reference"], rec.ids["logreg-reference"]
    bad = {"Authorization": "Token 0000000000000000000000000000000000000000"}
    user = {"Authorization": f"Token {user_token}"}
    base = {"name": "eq error", "num_workers": 2}
    posts = {
        "run-no-name": {"num_workers": 2},
        "run-too-many-workers": {**base, "num_workers": 3},
        "run-unknown-task": {**base, "task": "nope"},
        "run-bad-algorithm-option": {**base, "algorithm": "powersgd",
                                     "algorithm_options": {"rank": 0}},
        "run-unknown-algorithm": {**base, "algorithm": "nope"},
        "run-implementation-of-another-task": {**base, "implementation": "spark"},
        "run-budget-over-limit": {**base, "time_budget": 200, "time_limit": 1000},
        "run-budget-on-custom": {**base, "custom_image_command": "true", "time_budget": 5},
        "run-resume-finished": {**base, "resume_from": ref},
        "run-resume-unknown": {**base, "resume_from": 99999},
        "run-resume-custom": {**base, "resume_from": rec.ids["custom-failing"]},
        "run-bad-seed": {**base, "seed": -1},
        "run-lr-schedule-wrong-task": {**base, "lr_schedule": "cosine"},
        "run-bad-backend": {**base, "backend": "nope"},
        "series-seed-beside-seeds": {**base, "seeds": [1], "seed": 1},
        "metric-nan": {"run_id": ref, "name": "x", "value": "nan"},
        "metric-unknown-run": {"run_id": 99999, "name": "x", "value": 1},
        "metric-both-keys": {"run_id": ref, "pod_name": "p", "name": "x", "value": 1},
        "metric-evaluated-name": {"run_id": ref, "name": "evaluated_val_accuracy", "value": 1},
        "metric-after-end": [{"run_id": ref, "name": "val_accuracy", "value": 0.5,
                              "metadata": {"step": 1, "elapsed": 1.0}}],
    }  # fmt: skip
    out: dict[str, Any] = {}
    for label, body in posts.items():
        path = "/api/series/" if label.startswith("series") else "/api/runs/"
        path = "/api/metrics/" if label.startswith("metric") else path
        out[label] = rec.answer(m.post(path, body))
    gets = {
        "run-unknown": "/api/runs/99999/",
        "series-unknown": "/api/series/99999/",
        "metrics-unknown-run": "/api/metrics/99999/?metric_type=run",
        "metrics-not-an-id": "/api/metrics/abc/?metric_type=run",
        "metrics-bad-details": f"/api/metrics/{ref}/?metric_type=run&details=maybe",
        "metrics-details-summarize": f"/api/metrics/{ref}/?metric_type=run&details=1&summarize=2",
        "metrics-bad-summarize": f"/api/metrics/{ref}/?metric_type=run&summarize=0",
        "predictions-unknown-step": f"/api/runs/{ref}/predictions/999999/",
        "model-of-custom-run": f"/api/runs/{rec.ids['custom-failing']}/model/",
        "unknown-path": "/api/nope/",
        "logs-unknown-run": "/api/runs/99999/logs/",
    }
    for label, path in gets.items():
        out[label] = rec.answer(m.get(path))
    out["delete-unknown"] = rec.answer(m.request("DELETE", "/api/runs/99999/"))
    out["no-token"] = rec.answer(m.session.get(m.url + "/api/runs/", headers={"Authorization": ""}))
    out["bad-token"] = rec.answer(m.request("GET", "/api/runs/", headers=bad))
    out["bad-token-post"] = rec.answer(m.request("POST", "/api/runs/", json=base, headers=bad))
    out["user-custom-command"] = rec.answer(
        m.request("POST", "/api/runs/", json={**base, "custom_image_command": "true"}, headers=user)
    )
    out["user-metric"] = rec.answer(
        m.request(
            "POST", "/api/metrics/", json={"run_id": ref, "name": "x", "value": 1}, headers=user
        )
    )
    out["user-trust"] = rec.answer(
        m.request("POST", "/api/trust/", json={"public_key": "x", "name": "x"}, headers=user)
    )
    out["user-summary"] = rec.answer(
        m.request("POST", f"/api/runs/{ref}/summary/", json={"x": 1}, headers=user)
    )
    out["user-reads-run"] = {
        "status": m.request("GET", f"/api/runs/{ref}/", headers=user).status_code
    }
    out["form-body-415"] = rec.answer(
        m.request("POST", "/api/runs/", data="x", headers={"Content-Type": "text/plain"})
    )
    out["malformed-json"] = rec.answer(
        m.request("POST", "/api/runs/", data="{", headers={"Content-Type": "application/json"})
    )
    octet = {"Content-Type": "application/octet-stream"}
    out["model-garbage"] = rec.answer(
        m.request(
            "POST", f"/api/runs/{ref}/model/?dataset=synthetic", data=b"not onnx", headers=octet
        )
    )
    out["model-garbage-logreg"] = rec.answer(
        m.request(
            "POST", f"/api/runs/{logreg}/model/?dataset=synthetic", data=b"\0" * 64, headers=octet
        )
    )
    out["predictions-garbage"] = rec.answer(m.request(
        "POST", f"/api/runs/{ref}/predictions/?dataset=synthetic&step=1", data=b"PK\3\4bad",
        headers=octet))  # fmt: skip
    out["summary-after-end-staff"] = rec.answer(m.post(f"/api/runs/{ref}/summary/", {"x": 1}))
    return out


def record_tree(tree: Path, out: Path, keep_home: bool) -> None:
    sys.path.insert(0, str(tree))  # the tree's own helpers, where the harness imports any
    from tests.equivalence import script
    from tests.equivalence.live import start_master
    from tests.equivalence.normalize import Normalizer
    from tests.services import postgres_server

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="mlbench-eq-"))
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    timings: dict[str, float] = {}
    with postgres_server() as pg:
        master = start_master(tree, pg, work / "home-a", script.SHIM)
        second = None
        try:
            norm = Normalizer({str(work): "<work>", str(tree): "<tree>",
                               sys.executable: "<python>", master.url: "<master>"})  # fmt: skip
            rec = script.Recorder(master, norm)
            user_token = master.manage("mlbench_token", "eq-user", "--create-user").strip()
            rec.static()
            defaults = rec.record["static"]["defaults"]
            implementations = {
                name: bool(info.get("available", True))
                for name, info in (defaults.get("implementations") or {}).items()
                if isinstance(info, dict)
            }
            rec.record["implementations"] = implementations
            step = time.monotonic()
            rec.training(implementations)
            timings["training"] = time.monotonic() - step
            step = time.monotonic()
            rec.resume()
            timings["resume"] = time.monotonic() - step
            rec.record["errors"].update(errors(rec, user_token))
            rec.cli()
            second = start_master(tree, pg, work / "home-b", script.SHIM)
            rec.bundles(second)
        finally:
            if second is not None:
                second.down()
            master.down()
    timings["total"] = time.monotonic() - started
    rec.record["meta"] = {"tree": str(tree), "commit": commit, "seconds": timings,
                          "ids": rec.ids, "work": str(work)}  # fmt: skip
    out.write_text(json.dumps(rec.record, indent=1, sort_keys=True, default=str) + "\n")
    print(f"recorded {tree} ({commit[:10]}) in {timings['total']:.0f} s -> {out}")
    if not keep_home:
        subprocess.run(["rm", "-rf", str(work)], check=False)


# Excluded by rule: a series' bands and curves are drawn over the benchmark clock, so which
# seed's evaluation comes first (and so each band's first point) depends on the runs' speed
# even when every run's accuracies are the same (seen old vs new: the two 2-worker seeds'
# first evaluations came in the other order; each run's own points were identical).
ORDERED_BY_CLOCK = ("/series/detail/statistics/bands", "/series/detail/statistics/curves")


def compare_files(old_path: Path, new_path: Path, noise_pairs: list[list[str]]) -> int:
    from tests.equivalence.normalize import Normalizer, compare, noise_paths, short

    def load(path: Path | str) -> dict[str, Any]:
        """A record without its meta, normalized again (the rules are idempotent, so a
        record made before a rule was added is held to it too)."""
        record = json.loads(Path(path).read_text())
        record.pop("meta", None)
        return Normalizer({}).value(record)

    old, new = load(old_path), load(new_path)
    noise: set[str] = set(ORDERED_BY_CLOCK)
    for first, second in noise_pairs:
        noise |= noise_paths(load(first), load(second))
    failures, additions, met = compare(old, new, noise)
    print(f"excluded as nondeterministic (differ between same-tree records): {len(noise)}")
    for path in sorted(noise):
        print(f"  noise {path}")
    print(f"additions (keys only in {new_path}): {len(additions)}")
    for path, _kind, _a, b in additions:
        print(f"  added {path} = {short(b)}")
    print(f"differences: {len(failures)}")
    for path, kind, a, b in failures:
        print(f"  {kind} {path}\n    old: {short(a)}\n    new: {short(b)}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.equivalence.master_behaviour")
    parser.add_argument("--tree", type=Path, help="the checkout to run")
    parser.add_argument("--out", type=Path, help="where to write its normalized record")
    parser.add_argument("--keep-home", action="store_true", help="keep the masters' homes")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--noise", nargs=2, action="append", default=[],
                        metavar=("A", "B"), help="two records of one tree (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.compare:
        return compare_files(Path(args.compare[0]), Path(args.compare[1]), args.noise)
    if not args.tree or not args.out:
        parser.error("--tree and --out (or --compare OLD NEW)")
    record_tree(args.tree.resolve(), args.out.resolve(), args.keep_home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
