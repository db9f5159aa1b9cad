"""Stored runs for the results tests: rows made with the ORM (as the series queue makes
them), their metric points and summaries posted through the API as a worker would."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run, Series
from mlbench_master.cluster.node_kinds import RECORD_KEY
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import graded_name
from tests.summaries import summary_body

START = dt.datetime(2026, 11, 1, 12, 0, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False


@pytest.fixture
def staff_api(db) -> APIClient:
    client = APIClient()
    token = issue_user_token("root", create_user=True, superuser=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def api(db) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('alice', create_user=True)}")
    return client


class Maker:
    """Makes series and runs with stored results."""

    def __init__(self, client: APIClient) -> None:
        self.client = client

    def series(self, task: str = "logreg-epsilon", target: str = "light", **kw) -> Series:
        return Series.objects.create(
            name=kw.pop("name", "s"),
            seeds=kw.pop("seeds", [1, 2, 3]),
            worker_counts=kw.pop("worker_counts", [1, 2]),
            settings={"task": task, "target": target, **kw},
        )

    def run(
        self,
        series: Series | None,
        seed: int,
        workers: int,
        evals: list[tuple[float, float, float]],  # (elapsed s, val accuracy, epoch)
        # (for a task whose goal is another metric, task 3's perplexity: that metric)
        *,
        target_value: float = 0.8,
        state: str = Run.FINISHED,
        task: str = "logreg-epsilon",
        target: str = "light",
        dataset: str = "synthetic",
        rate: float = 1000.0,
        timings: tuple[float, float, float] = (0.01, 0.05, 0.02),
        summary: bool = True,
        config: dict | None = None,
        graded: list[float] | None = None,  # the evaluator's grade of each evaluation
        nodes: list[dict] | None = None,  # the launch record's nodes (cluster/node_kinds.py)
        seconds: float | None = None,  # start to end; None: ended when the points are in
        reported_ttt: float | None = None,  # else the reaching evaluation's clock
    ) -> Run:
        fields = {
            "name": f"seed {seed} x{workers}",
            "seed": seed,
            "num_workers": workers,
            "task": task,
            "target": target,
            "dataset": "synthetic",
        }
        if nodes is None:
            run = Run.objects.create(**fields, series=series, state=state, started_at=START)
        else:  # made as the master makes runs (it copies the price table), then launched
            run = lifecycle.new_run(fields, None, Run.QUEUED, series=series)
            Run.objects.filter(pk=run.pk).update(state=state, started_at=START)
            lifecycle.record_launch(run, {RECORD_KEY: nodes})
        Run.objects.filter(pk=run.pk).update(dataset_used=dataset)
        clock = START + dt.timedelta(seconds=30)  # 30 s of initialisation
        points, ttt = [], None
        info = catalogue.get(task)
        throughput, goal = info.throughput_metric, info.goal(target)
        down = goal.direction == catalogue.DOWN
        for i, (elapsed, acc, epoch) in enumerate(evals):
            meta = {"epoch": epoch, "step": (i + 1) * 10, "elapsed": elapsed}
            date = clock + dt.timedelta(seconds=elapsed)
            points.append(self._point(run, goal.metric, acc, date, meta))
            points.append(self._point(run, throughput, rate + i, date, meta))
            for name, value in zip(
                ("time_data", "time_compute", "time_comm"), timings, strict=True
            ):
                points.append(self._point(run, name, value * (1 + i / 10), date, meta))
            if ttt is None and (acc <= target_value if down else acc >= target_value):
                ttt = elapsed if reported_ttt is None else reported_ttt
                points.append(self._point(run, "time_to_target", ttt, date, meta))
        response = self.client.post("/api/metrics/", points, format="json")
        assert response.status_code == 201, response.content
        for i, grade in enumerate(graded or []):  # stored as the predictions intake stores them
            elapsed, _, epoch = evals[i]
            Metric.objects.create(
                run=run,
                name=graded_name("val_accuracy"),
                value=grade,
                date=clock + dt.timedelta(seconds=elapsed + 0.5),
                metadata={"epoch": epoch, "step": (i + 1) * 10, "elapsed": elapsed},
            )
        if summary and evals:
            body = summary_body(
                task,
                dataset=dataset,
                num_workers=workers,
                target=target,
                target_accuracy=target_value,
                reached=ttt is not None,
                time_to_target=ttt,
                **(
                    {
                        "final_val_perplexity": evals[-1][1],
                        "best_val_perplexity": min(a for _, a, _ in evals),
                    }
                    if down
                    else {
                        "final_val_accuracy": evals[-1][1],
                        "best_val_accuracy": max(a for _, a, _ in evals),
                    }
                ),  # fmt: skip
                epochs=evals[-1][2],
                throughput=rate + 0.5,
                comm_share=timings[2] / sum(timings),
                elapsed=evals[-1][0],
                seed=seed,
                config=config
                or {"batch_size": 128, "peak_lr": 4.0, "train_samples": 4000, "test_samples": 800},
            )
            response = self.client.post(f"/api/runs/{run.pk}/summary/", body, format="json")
            assert response.status_code == 200, response.content
        end = timezone.now() if seconds is None else START + dt.timedelta(seconds=seconds)
        Run.objects.filter(pk=run.pk).update(finished_at=end)
        run.refresh_from_db()
        return run

    @staticmethod
    def _point(run: Run, name: str, value: float, date: dt.datetime, meta: dict) -> dict:
        return {
            "run_id": run.pk,
            "name": name,
            "value": value,
            "date": date.isoformat(),
            "metadata": meta,
            "cumulative": False,
            "uid": uuid.uuid4().hex,
        }


@pytest.fixture
def maker(staff_api) -> Maker:
    return Maker(staff_api)
