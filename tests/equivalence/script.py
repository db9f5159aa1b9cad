"""The fixed script the equivalence harness drives through a master: what is asked, in
which order, and what of each answer is recorded (normalized by normalize.Normalizer).

Every training run is tiny and fixed-seed with 2 workers on generated data, and bounded
by epochs, never by a time budget, so its losses and accuracies do not depend on the
machine's speed. Runs asked by their task fields keep the master's own worker command;
the shim (shim/sitecustomize.py) only shrinks the data the worker trains on.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from tests.equivalence.live import Master
from tests.equivalence.normalize import Normalizer

ENDED = ("FINISHED", "FAILED", "CANCELLED")
LM_SMALL = (
    " --dataset synthetic --vocab-size 200 --train-tokens 40000 --test-tokens 4000"
    " --batch-size 8 --threads 1 --log-every 5 --max-epochs 1 --seed 1"
)
# The data sizes the shim appends to the master's worker command, by task and seed.
SHIM = {
    "resnet20-cifar10": {"*": "--train-images 256 --log-every 1",
                         "7": "--train-images 2048 --log-every 2"},
    "logreg-epsilon": {"*": "--train-samples 2048 --log-every 2"},
}  # fmt: skip
RESNET = {"task": "resnet20-cifar10", "dataset": "synthetic", "max_epochs": 1,
          "test_examples": 128, "seed": 1}  # fmt: skip
LOGREG = {"task": "logreg-epsilon", "dataset": "synthetic", "max_epochs": 1,
          "test_examples": 512, "seed": 1}  # fmt: skip


def lm(task: str, model: str) -> dict[str, Any]:
    return {"task": task, "run_all_nodes": True, "time_limit": 600, "test_examples": 4000,
            "custom_image_command": f"python -m mlbench_worker {task} --model {model}"
            + LM_SMALL}  # fmt: skip


def runs(implementations: dict[str, bool]) -> list[tuple[str, dict[str, Any]]]:
    """Every task and every implementation the workers here can import."""
    planned = [
        ("resnet-reference", {**RESNET, "implementation": "reference"}),
        ("resnet-torch-ddp", {**RESNET, "implementation": "torch-ddp"}),
        ("resnet-tensorflow", {**RESNET, "implementation": "tensorflow"}),
        ("resnet-powersgd", {**RESNET, "algorithm": "powersgd", "algorithm_options": {"rank": 2}}),
        ("logreg-reference", {**LOGREG}),
        ("logreg-spark", {**LOGREG, "implementation": "spark"}),
        ("awd-lstm", lm("awd-lstm-wikitext2", "awd-lstm-tiny")),
        ("gpt", lm("gpt-wikitext2", "gpt-tiny")),
        ("backend-benchmark", {"task": "backend-benchmark", "time_budget": 4}),
        ("custom-failing", {"run_all_nodes": True, "custom_image_command":
                            "python -c \"import sys; print('loading data'); sys.exit(3)\""}),
    ]  # fmt: skip
    return [
        (label, body)
        for label, body in planned
        if implementations.get(body.get("implementation", "reference"), True)
    ]


class Recorder:
    """Drives one master through the script and keeps the normalized answers."""

    def __init__(self, master: Master, norm: Normalizer) -> None:
        self.m = master
        self.n = norm
        self.ids: dict[str, int] = {}
        self.record: dict[str, Any] = {"runs": {}, "errors": {}, "cli": {}, "bundles": {}}

    # -- helpers
    def answer(self, response) -> dict[str, Any]:  # noqa: ANN001
        try:
            body: Any = response.json()
        except ValueError:
            body = self.n.lines(response.text[:2000])
        return {"status": response.status_code, "body": self.n.value(body)}

    def create(self, label: str, body: dict[str, Any]) -> dict[str, Any]:
        payload = {"name": f"eq {label}", "num_workers": 2, "num_cpus": 1, "queue": True, **body}
        response = self.m.post("/api/runs/", payload)
        if response.status_code != 201:
            raise RuntimeError(f"{label}: {response.status_code} {response.text}")
        self.ids[label] = response.json()["id"]
        return self.answer(response)

    def wait_ended(self, ids: list[int], timeout: float) -> None:
        def ended() -> bool:
            listed = {r["id"]: r["state"] for r in self.m.json("/api/runs/")}
            return all(listed.get(i) in ENDED for i in ids)

        self.m.wait(ended, timeout, f"runs {ids} to end", every=1.0)

    def wait_audit(self, run_id: int, timeout: float = 300) -> None:
        def settled() -> bool:
            audit = (self.m.run(run_id).get("evaluation") or {}).get("audit") or {}
            return audit.get("status") != "pending"

        self.m.wait(settled, timeout, f"run {run_id}'s audit")

    def snapshot(self, run_id: int, created: dict[str, Any] | None) -> dict[str, Any]:
        m, n = self.m, self.n
        path = f"/api/metrics/{run_id}/"
        model = m.get(f"/api/runs/{run_id}/model/")
        return {
            "created": created,
            "run": n.value(m.run(run_id)),
            "metrics": n.metrics(m.json(path, metric_type="run", details=1)),
            "summarized": n.metrics(m.json(path, metric_type="run", summarize=2,
                                           metric_filter="train_loss,val_accuracy,"
                                           "val_perplexity,evaluated_val_accuracy")),
            "last_n": n.metrics(m.json(path, metric_type="run", last_n=1)),
            "predictions": n.value(m.json(f"/api/runs/{run_id}/predictions/")),
            "prediction_files": [
                predictions_content(m.get(f"/api/runs/{run_id}/predictions/{p['step']}/").content)
                for p in m.json(f"/api/runs/{run_id}/predictions/")
            ],
            "model": {"status": model.status_code, "bytes": len(model.content)},
        }  # fmt: skip

    # -- the script
    def static(self) -> None:
        m, n = self.m, self.n
        self.record["static"] = {
            "defaults": n.value(m.json("/api/runs/defaults/")),
            "health": self.answer(m.get("/api/health/", cluster=1)),
            "installation": n.value(m.json("/api/installation/")),
        }

    def training(self, implementations: dict[str, bool]) -> None:
        created = {label: self.create(label, body) for label, body in runs(implementations)}
        series = self.m.post(
            "/api/series/", {"name": "eq series", **without(LOGREG, "seed"), "num_cpus": 1,
                             "seeds": [1, 2], "workers": [1, 2]},
        )  # fmt: skip
        if series.status_code != 201:
            raise RuntimeError(f"series: {series.status_code} {series.text}")
        self.ids["series"] = series.json()["id"]
        members = [r["id"] for r in series.json()["runs"]]
        # A run that does not ask to queue while others are queued: 409.
        self.record["errors"]["busy-409"] = self.answer(
            self.m.post("/api/runs/", {"name": "eq busy", "num_workers": 1})
        )
        self.wait_ended([self.ids[label] for label in created] + members, timeout=1800)
        for label in created:
            self.wait_audit(self.ids[label])
        for run_id in members:
            self.wait_audit(run_id)
        for label, answer in created.items():
            self.record["runs"][label] = self.snapshot(self.ids[label], answer)
        for index, run_id in enumerate(members):
            self.record["runs"][f"series-member-{index}"] = self.snapshot(run_id, None)
        sid = self.ids["series"]
        self.record["series"] = {
            "created": self.n.value(series.json()),
            "detail": self.n.value(self.m.json(f"/api/series/{sid}/")),
        }
        mllog = self.m.get(f"/api/runs/{self.ids['resnet-reference']}/mllog/")
        self.record["mllog"] = {"status": mllog.status_code, "lines": self.n.lines(mllog.text)}

    def resume(self) -> None:
        parent_body = {**RESNET, "target": "paper", "max_epochs": 4, "seed": 7}
        created = self.create("resume-parent", parent_body)
        pid = self.ids["resume-parent"]
        checkpoints = self.m.wait(lambda: self.checkpoints(pid), 600, "a first checkpoint", 0.1)
        cancelled = self.m.post(f"/runs/{pid}/cancel/", {})
        self.wait_ended([pid], 120)
        last = self.checkpoints(pid)[-1]
        parent = self.m.run(pid)
        step = (last.get("metadata") or {}).get("step", 0)
        metrics = self.m.json(f"/api/metrics/{pid}/", metric_type="run", details=1)
        kept = {name: [p for p in points if (p.get("metadata") or {}).get("step", 0) <= step]
                for name, points in metrics.items() if not name.startswith("evaluated_")}  # fmt: skip
        self.record["runs"]["resume-parent"] = {
            "created": created,
            "cancel": {"status": cancelled.status_code,
                       "state": cancelled.json().get("state")},
            "state": parent["state"],
            "first_checkpoint": self.n.value(checkpoints[0]),
            "last_checkpoint": self.n.value(last),
            "argv": self.n.value(parent["job_metadata"].get("local", {}).get("argv")),
            "metrics_to_checkpoint": self.n.metrics(kept),
        }  # fmt: skip
        child = self.create(
            "resume-child", {"resume_from": pid, "max_epochs": int(last["value"]) + 1}
        )
        self.wait_ended([self.ids["resume-child"]], 600)
        self.wait_audit(self.ids["resume-child"])
        self.record["runs"]["resume-child"] = self.snapshot(self.ids["resume-child"], child)

    def checkpoints(self, run_id: int) -> list[dict[str, Any]]:
        body = self.m.json(f"/api/metrics/{run_id}/", metric_type="run",
                           metric_filter="checkpoint", details=1)  # fmt: skip
        return body.get("checkpoint", [])

    def cli(self) -> None:
        ref, logreg = str(self.ids["resnet-reference"]), str(self.ids["logreg-reference"])
        calls = {
            "runs": ["runs"],
            "show-reference": ["show", ref],
            "show-logreg": ["show", logreg],
            "show-lm": ["show", str(self.ids["awd-lstm"])],
            "report": ["report", ref, logreg],
            "series": ["series", str(self.ids["series"])],
            "show-unknown": ["show", "99999"],
        }
        for label, args in calls.items():
            done = self.m.cli(*args)
            self.record["cli"][label] = {"rc": done.returncode,
                                         "stdout": self.n.lines(done.stdout),
                                         "stderr": self.n.lines(done.stderr)[-5:]}  # fmt: skip

    def bundle(self, path: str) -> tuple[dict[str, Any], bytes]:
        response = self.m.get(path)
        shown: dict[str, Any] = {"status": response.status_code,
                                 "type": response.headers.get("Content-Type"),
                                 "disposition": response.headers.get("Content-Disposition")}  # fmt: skip
        if response.status_code == 200:
            with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
                shown["members"] = sorted(archive.namelist())
        else:
            shown.update(self.answer(response))
        return shown, response.content

    def bundles(self, second: Master | None) -> None:
        ref, sid = self.ids["resnet-reference"], self.ids["series"]
        out = self.record["bundles"]
        out["run"], run_zip = self.bundle(f"/api/runs/{ref}/bundle/")
        out["series"], series_zip = self.bundle(f"/api/series/{sid}/bundle/")
        out["several"], _ = self.bundle(f"/api/runs/bundle/?runs={ref},{self.ids['gpt']}")
        out["several-bad"], _ = self.bundle("/api/runs/bundle/?runs=x,1")
        out["several-unknown"], _ = self.bundle(f"/api/runs/bundle/?runs={ref},99999")
        out["unknown"], _ = self.bundle("/api/runs/99999/bundle/")
        out["own-import"] = self.import_(self.m, run_zip)
        out["truncated-import"] = self.import_(self.m, run_zip[: len(run_zip) // 2])
        out["member-missing-import"] = self.import_(self.m, drop_member(run_zip))
        out["form-import"] = self.answer(self.m.request("POST", "/api/bundles/",
                                                        data={"bundle": "x"}))  # fmt: skip
        if second is None:
            return
        out["import"] = self.import_(second, run_zip)
        out["import-again"] = self.import_(second, run_zip)
        out["import-series"] = self.import_(second, series_zip)
        imported = second.json("/api/runs/")
        out["imported-runs"] = self.n.value(sorted(imported, key=lambda r: r["id"]))
        first = min(r["id"] for r in imported)
        out["imported-run"] = self.n.value(second.run(first))
        out["imported-metrics"] = self.n.metrics(
            second.json(f"/api/metrics/{first}/", metric_type="run", details=1)
        )
        out["bundles-list"] = self.n.value(second.json("/api/bundles/"))
        out["resume-imported"] = self.answer(
            second.post("/api/runs/", {"name": "eq", "num_workers": 2, "resume_from": first})
        )
        out["metric-to-imported"] = self.answer(
            second.post("/api/metrics/", {"run_id": first, "name": "train_loss", "value": 1.0})
        )
        out["board"] = self.n.value(second.json("/api/results/"))

    def import_(self, master: Master, data: bytes) -> dict[str, Any]:
        return self.answer(master.request("POST", "/api/bundles/", data=data,
                                          headers={"Content-Type": "application/zip"}))  # fmt: skip


def drop_member(data: bytes) -> bytes:
    """The bundle without one of its members' files (a damaged upload)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    names = source.namelist()
    victim = next((n for n in names if n.endswith("logs.jsonl")), names[-1])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != victim:
                target.writestr(info, source.read(info.filename))
    return out.getvalue()


def predictions_content(data: bytes) -> dict[str, Any]:
    """A predictions file by what it holds: each array's SHA-256 (its `elapsed`, the
    benchmark clock, only as present). The file's own bytes hold that clock, so its
    sha256 differs from run to run whatever the predictions."""
    import hashlib

    import numpy as np

    with np.load(io.BytesIO(data)) as arrays:
        return {
            key: "<float>"
            if key == "elapsed"
            else hashlib.sha256(
                np.ascontiguousarray(arrays[key]).tobytes() + str(arrays[key].dtype).encode()
            ).hexdigest()
            for key in sorted(arrays.files)
        }


def without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in keys}
