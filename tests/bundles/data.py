"""Finished runs and series for the bundle tests, stored as a run stores them: rows made
with the ORM (as the queue makes them), points, summary and predictions posted through the
API (tests/results/conftest.py's Maker), log chunks appended as the run job appends them.
No worker runs: the bundle code reads only what is stored."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from rest_framework.test import APIClient

from mlbench_master.api.models import Metric, Run, Series
from mlbench_master.bundles import layout
from mlbench_master.runs.logs import append_logs
from tests.api.predictions_bodies import CIFAR, SEED, N, cifar_file
from tests.results.conftest import Maker


def without_run_ids(stats: dict) -> dict:
    """Series statistics with the run ids left out: an imported run has another id here than
    at its origin, so two installations' statistics are equal only up to those."""
    cost = stats.get("cost")
    if cost:
        cost = {**cost, "not_priced": [{**r, "run": None} for r in cost["not_priced"]]}
    return {**stats, "curves": [{**c, "run": None} for c in stats["curves"]], "cost": cost}


EVALS = [(20.0, 0.55, 1.0), (40.0, 0.93, 2.0), (60.0, 0.95, 3.0)]  # (elapsed s, acc, epoch)


def finished_series(staff: APIClient, wrong_grade: bool = False) -> Series:
    """A series of task 1a on generated data, seed 7, on 1 and 2 workers, each graded on a
    test set of N examples: three evaluations each, the first graded by the evaluator from
    a real predictions file (posted while the run is STARTED), logs of two ranks.
    `wrong_grade`: the stored grade of run 1's file is not what the evaluator says (an origin
    that graded wrongly)."""
    maker = Maker(staff)
    series = maker.series(task=CIFAR, target="light", seeds=[SEED], worker_counts=[1, 2])
    for workers in (1, 2):
        # Graded while it runs (an ended run's results are frozen), on its test set of N.
        run = maker.run(
            series, SEED, workers, EVALS, task=CIFAR, target="light", target_value=0.9,
            state=Run.STARTED,
        )  # fmt: skip
        end = run.finished_at
        Run.objects.filter(pk=run.pk).update(test_examples=N, finished_at=None)
        response = staff.post(
            f"/api/runs/{run.pk}/predictions/?dataset=synthetic",
            cifar_file(step=10),
            content_type="application/octet-stream",
        )
        assert response.status_code == 201, response.content
        append_logs(
            run,
            [(None, "stdout", "mpirun started\n")]
            + [(r, s, f"rank {r} {s} line {i}\n") for r in range(workers) for s in ("stdout", "stderr") for i in range(3)],
        )  # fmt: skip
        Run.objects.filter(pk=run.pk).update(state=Run.FINISHED, finished_at=end)
    if wrong_grade:
        first = series.runs.order_by("id").first()
        Metric.objects.filter(run=first, name="evaluated_val_accuracy").update(value=0.5)
    return series


def points(run: Run) -> list[tuple]:
    """A run's metric points, in the order they are compared: what must travel unchanged."""
    rows = Metric.objects.filter(run=run).order_by("name", "date", "value")
    return [(m.name, m.value, m.date, m.cumulative, m.metadata) for m in rows]


def logs(run: Run) -> list[tuple]:
    return list(run.log_chunks.order_by("seq").values_list("rank", "stream", "seq", "text"))


def members(bundle: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def rezip(files: dict[str, bytes]) -> bytes:
    """A zip of `files` (name -> bytes), deflated, in the given order."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def manifest(bundle: bytes) -> dict:
    return json.loads(members(bundle)[layout.MANIFEST])


def export(client: APIClient, path: str) -> bytes:
    response = client.get(path)
    assert response.status_code == 200, getattr(response, "content", b"")[:500]
    return b"".join(response.streaming_content)


def post_bundle(client: APIClient, body: bytes):
    return client.post("/api/bundles/", body, content_type="application/zip")


def home_files(home: Path) -> list[str]:
    """What an import may write under MLBENCH_HOME (predictions, models, kept bundles)."""
    return sorted(
        str(p.relative_to(home))
        for folder in ("predictions", "models", "bundles")
        for p in (home / folder).rglob("*")
        if p.is_file()
    )
