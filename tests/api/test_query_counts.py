"""The reads a public installation serves most (the results board, the runs list, compare,
a study page) cost the same SQL queries with a few rows as with many (issue 49: no N+1).

Each test stores a few rows, counts the queries of each read, stores more of every kind the
read shows (local runs, series, runs imported from a trusted and from an unverified
installation, evaluator grades, studies with reused cells) and counts again: the counts
must be equal. Counted with Django's CaptureQueriesContext around one request each, twice:
with nothing kept (the kept results and board entries emptied first, results/models.py: the
read makes every result and entry, as the first read of a new installation does) and with
everything kept (the same read made once before: only what is current is read). Times at
the scale of 10,000 runs: tests/benchmarks/bench_pages.py.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from mlbench_master.api.models import Metric, Run
from mlbench_master.bundles import trust
from mlbench_master.results import board, convergence
from mlbench_master.results.models import StoredEntry, StoredResult
from mlbench_worker.shared import catalogue, metric_points
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.shared.host_cpu import cpu_model
from tests.board.stored import NEVER, evals
from tests.bundles import data
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db

TASK = "logreg-epsilon"
GRADES = [0.5, 0.85, 0.86]  # the evaluator's grade of each of `evals`' three evaluations
# What the compare page's feed asks of each picked run (compare.js, feed.js): these names,
# summarized to 500 points.
COMPARE_NAMES = [
    metric_points.VAL_ACCURACY,
    graded_name(metric_points.VAL_ACCURACY),
    *dict.fromkeys(t.throughput_metric for t in catalogue.TASKS.values()),
    metric_points.TIME_TO_TARGET,
    metric_points.ELAPSED,
    metric_points.EPOCH,
]


def forget() -> None:
    """Nothing kept: the next read makes every result and board entry again."""
    StoredEntry.objects.all().delete()
    StoredResult.objects.update(made=None)
    board._RANKED.clear()  # and what a process keeps of them (both exact, both emptied)
    convergence._FOUND.clear()


def queries(client: APIClient | Client, path: str, kept: bool = False) -> list[str]:
    """The SQL of one GET of `path`, which must answer 200: with nothing kept, or (`kept`)
    after the same read made and kept what it could."""
    forget()
    if kept:
        assert client.get(path).status_code == 200
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, getattr(response, "content", b"")[:500]
    return [q["sql"] for q in captured.captured_queries]


def assert_flat(few: dict[str, list[str]], many: dict[str, list[str]]) -> None:
    """Each path's queries as many with many rows as with few; else the ones that grew."""
    grew = {}
    for path, sql in few.items():
        if len(many[path]) != len(sql):
            a, b = Counter(q[:160] for q in sql), Counter(q[:160] for q in many[path])
            grew[path] = [f"{a[q]} -> {b[q]}: {q}" for q in b if a[q] != b[q]]
    assert not grew, grew


@pytest.fixture
def home(settings, tmp_path: Path) -> Path:
    """MLBENCH_HOME of this installation ("here") and of two others runs are imported from
    ("origin", trusted here, and "stranger", not)."""
    for name in ("origin", "stranger", "here"):
        (tmp_path / name).mkdir()
    settings.MLBENCH_HOME = tmp_path / "here"
    return tmp_path


@pytest.fixture
def page(staff_api) -> Client:
    """A signed-in browser session of the staff user (the dashboard's pages)."""
    client = Client()
    client.force_login(get_user_model().objects.get(username="root"))
    return client


class Installation:
    """Adds rows of every kind the board and the lists show, `k` of each at a time."""

    def __init__(self, staff: APIClient, settings, home: Path) -> None:
        self.staff, self.settings, self.home = staff, settings, home
        self.maker = Maker(staff)
        self.seeds = iter(range(1, 10_000))

    def grow(self, k: int) -> None:
        """Bundles are made first (each at its origin's MLBENCH_HOME), imported last: an
        import checks the bundle's signer against this installation's trusted keys."""
        bundles = [self._exported("origin"), *(self._exported("stranger") for _ in range(k))]
        bundles += [self._exported("origin") for _ in range(k - 1)]
        if not trust.known():
            self.settings.MLBENCH_HOME = self.home / "origin"
            key = self.staff.get("/api/installation/").json()["public_key"]
            self.settings.MLBENCH_HOME = self.home / "here"
            trust.add(key, "the trusted origin", None)
        run = self.maker.run
        for _ in range(k):
            seed = next(self.seeds)
            run(None, seed, 2, evals(40.0), task=TASK, dataset="epsilon")  # self-reported
            run(None, seed, 1, evals(60.0), task=TASK, dataset="epsilon", graded=GRADES)
            run(None, seed, 4, NEVER, task=TASK, dataset="epsilon")  # never reached
            run(None, seed, 2, evals(10.0), task=TASK, dataset="synthetic")
            Run.objects.create(name="waiting", task=TASK, state=Run.QUEUED)  # not on the board
        # A series of the reference implementation, graded: a convergence reference.
        seeds = [next(self.seeds) for _ in range(k)]
        series = self.maker.series(task=TASK, seeds=seeds, worker_counts=[1, 2])
        for seed in seeds:
            for workers in (1, 2):
                run(series, seed, workers, evals(40.0), task=TASK, dataset="epsilon",
                    graded=GRADES)  # fmt: skip
        for bundle in bundles:
            answer = data.post_bundle(self.staff, bundle)
            assert answer.status_code == 201, answer.content

    def _exported(self, where: str) -> bytes:
        """A graded run's bundle made at installation `where` (then removed there)."""
        self.settings.MLBENCH_HOME = self.home / where
        far = self.maker.run(None, next(self.seeds), 2, evals(30.0), task=TASK,
                             dataset="epsilon", graded=GRADES)  # fmt: skip
        bundle = data.export(self.staff, f"/api/runs/{far.pk}/bundle/")
        Run.objects.filter(pk=far.pk).delete()
        self.settings.MLBENCH_HOME = self.home / "here"
        return bundle


def count_twice(grow: Callable[[], object], paths: dict[str, APIClient | Client]) -> None:
    """Count each path's queries, `grow()`, count again: the same, with nothing kept and
    with everything kept."""
    for path, client in paths.items():
        queries(client, path)  # anything made once for the installation (its key) is made
    few = {(path, k): queries(client, path, k) for path, client in paths.items() for k in (0, 1)}
    grow()
    assert_flat(
        few, {(path, k): queries(client, path, k) for path, client in paths.items() for k in (0, 1)}
    )


def test_the_board_costs_the_same_queries_with_few_and_many_entries(
    staff_api, page, settings, home
):
    """GET /api/results/ (whole and per task, and pages of it) and the board's pages. The
    pages themselves read only the session and the user: board.js fetches the board from
    the API."""
    made = Installation(staff_api, settings, home)
    made.grow(1)
    paths = {"/api/results/": staff_api, f"/api/results/?task={TASK}": staff_api,
             f"/api/results/?task={TASK}&origin=imported": staff_api,
             "/api/results/?limit=3": staff_api,
             f"/api/results/?task={TASK}&limit=4&offset=2": staff_api,
             "/board/": page, f"/board/{TASK}/": page}  # fmt: skip
    count_twice(lambda: made.grow(5), paths)
    entries = staff_api.get("/api/results/").json()["count"]
    assert entries >= 5 * 5 + 2 * 5  # lone runs, series groups and imported runs shown


def test_the_runs_list_costs_the_same_queries_with_few_and_many_runs(
    staff_api, page, settings, home
):
    """The whole list (the original's answer), a page of it at its start and further on,
    three runs picked by id, and the runs page (a shell: runs.js asks for a page). A list
    that holds a QUEUED run reads the queue once (its places): each read here holds one
    with few and with many runs, the newest being queued."""
    made = Installation(staff_api, settings, home)
    made.grow(1)
    Run.objects.create(name="queued last", task=TASK, state=Run.QUEUED)
    first = ",".join(str(pk) for pk in Run.objects.order_by("id").values_list("id", flat=True)[:3])
    paths = {"/api/runs/": staff_api, "/api/runs/?limit=5": staff_api,
             "/api/runs/?limit=1000&offset=2": staff_api, f"/api/runs/?id={first}": staff_api,
             "/runs/": page}  # fmt: skip
    count_twice(lambda: (made.grow(4), Run.objects.create(name="queued last", task=TASK,
                                                          state=Run.QUEUED)), paths)  # fmt: skip
    assert len(staff_api.get("/api/runs/").json()) > 40
    assert staff_api.get("/api/runs/?limit=5").json()["count"] > 40


def test_compare_of_twenty_runs_costs_a_fixed_number_of_queries_per_request(
    staff_api, page, settings, home
):
    """What one load of the compare page asks of the server (compare.js): the page (a shell:
    the session and the user), the picker's page of the runs list (GET /api/runs/?limit=50)
    and the picked runs by id (GET /api/runs/?id=...), then GET /api/metrics/<run>/ for
    each picked run (its accuracy, throughput and clock, summarized to 500 points). So a
    page of 20 runs makes 23 requests; each costs the same queries whatever the number of
    runs, of picked runs and of each run's points. Counted: 2 runs picked among a few, and
    20 among 20+; one run's metrics at 3 evaluations and at 300."""
    made = Installation(staff_api, settings, home)
    made.grow(1)
    short = Run.objects.filter(series__isnull=False).order_by("id").first()
    long = made.maker.run(None, 99, 2, [(10.0 * i, 0.5 + i / 1000, i) for i in range(1, 300)],
                          task=TASK, dataset="epsilon")  # fmt: skip
    metrics = f"?metric_type=run&metric_filter={','.join(COMPARE_NAMES)}&summarize=500"

    def load(picked: list[int], run: Run) -> dict[str, list[str]]:
        return {"/compare/": queries(page, "/compare/"),
                "picker": queries(staff_api, "/api/runs/?limit=50"),
                "picked": queries(staff_api, f"/api/runs/?id={','.join(map(str, picked))}"),
                "metrics": queries(staff_api, f"/api/metrics/{run.pk}/{metrics}")}  # fmt: skip

    few = load([short.pk, long.pk], short)
    made.grow(4)
    assert Run.objects.count() >= 20
    ended = Run.objects.filter(state__in=Run.FINAL_STATES)  # what one compares
    many = load(list(ended.values_list("id", flat=True)[:20]), long)
    assert_flat(few, many)


def _ended(run: Run, reach_at: float) -> None:
    """`run` FINISHED an hour ago (past the grace for late results), graded by the
    evaluator reaching 0.8 at `reach_at` s."""
    ago = timezone.now() - dt.timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, started_at=ago, finished_at=ago,
        summary={"time_to_target": reach_at, "reached": True, "epochs": 2.0,
                 "hardware": {"cpu_model": cpu_model()}},  # reusable on this machine
    )  # fmt: skip
    for i, (seconds, accuracy) in enumerate([(1.0, 0.4), (reach_at / 2, 0.5), (reach_at, 0.85)]):
        meta = {"elapsed": seconds, "epoch": i + 1.0, "step": (i + 1) * 16}
        Metric.objects.create(run=run, name="val_accuracy", value=accuracy, metadata=meta)
        Metric.objects.create(run=run, name=graded_name("val_accuracy"), value=accuracy,
                              metadata=meta)  # fmt: skip


def _study(api: APIClient, body: dict) -> int:
    """A study created through the API, every run of it ended and graded."""
    created = api.post("/api/studies/", body, format="json")
    assert created.status_code == 201, created.content
    study = created.json()
    for i, cell in enumerate(study["cells"]):
        for run in Run.objects.filter(series_id=cell["series"]).exclude(state__in=Run.FINAL_STATES):
            _ended(run, 5.0 + i)
    return study["id"]


SMALL = {"name": "small", "algorithms": ["allreduce"], "workloads": [TASK],
         "conditions": ["unlimited"], "seeds": [1], "held_out": False}  # fmt: skip
LARGE = {"name": "large", "workloads": [TASK], "conditions": ["unlimited", "10mbit"],
         "seeds": [1, 2, 3],
         "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}},
                        {"algorithm": "topk", "options": {"density": 0.01}}]}  # fmt: skip


def test_a_study_page_costs_the_same_queries_with_few_and_many_cells(api, page, redis_settings):
    """GET /api/studies/<id>/ of a study of one cell and one run, and of one of 9 cells (3
    algorithms x 2 conditions of 3 seeds, and held-out variants), each with a cell reused
    from an earlier study (which says which: one query for all, only where a cell is
    reused); and the study page (a shell: study_detail.js fetches the API)."""
    _study(api, {**SMALL, "name": "first"})
    small = _study(api, SMALL)  # its one cell reused (read only where a cell is)
    body = api.get(f"/api/studies/{small}/").json()
    assert body["score"] is not None and body["cells"][0]["reused"]
    paths = {f"/api/studies/{small}/": api, f"/studies/{small}/": page}
    for path, client in paths.items():
        queries(client, path)
    few = {"detail": queries(api, f"/api/studies/{small}/"),
           "kept": queries(api, f"/api/studies/{small}/", kept=True),
           "page": queries(page, f"/studies/{small}/")}  # fmt: skip
    _study(api, {**LARGE, "name": "earlier"})
    large = _study(api, LARGE)
    body = api.get(f"/api/studies/{large}/").json()
    assert sum(c["reused"] for c in body["cells"]) == 6 and body["score"] is not None
    assert sum(len(c["runs"]) for c in body["cells"]) >= 20
    many = {"detail": queries(api, f"/api/studies/{large}/"),
            "kept": queries(api, f"/api/studies/{large}/", kept=True),
            "page": queries(page, f"/studies/{large}/")}  # fmt: skip
    assert_flat(few, many)


def test_the_algorithms_board_costs_the_same_queries_with_few_and_many_studies(
    api, page, redis_settings
):
    """GET /api/results/algorithms/ ranks every ended study's algorithms: two studies, then
    five, cells reused in both; and the board page that draws it."""
    _study(api, {**SMALL, "name": "first"})
    _study(api, SMALL)  # reuses the first's cell (its study read in one query for all)
    paths = {"/api/results/algorithms/": api, "/board/": page}
    count_twice(lambda: [_study(api, {**LARGE, "name": f"large {i}"}) for i in range(3)], paths)
    body = api.get("/api/results/algorithms/").json()
    assert body["count"] >= 3 and len({s for x in body["sections"] for s in x["studies"]}) >= 1
