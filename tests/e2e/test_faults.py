# Over 400 lines: every fault shares one live master and its checks of "stored once" and "one job".
"""Faults, with real processes: a service of the master dies while a real run posts metrics.

Each test runs the real ResNet-20 worker on 2 ranks (tiny synthetic data, a time budget so
the run outlasts the fault) through an embedded master that has a PostgreSQL server of its
own (restarting it disturbs no other test) and its own Redis (the supervisor's). While rank
0 posts metrics, one component goes away for a few seconds and comes back:

- PostgreSQL is stopped (every open connection is cut) and started again;
- Redis is killed and the supervisor starts a new, empty one;
- the web server is killed while ranks post, and the supervisor starts it again;
- the RQ worker is killed while its work horse watches the run (as when Redis was down
  for RQ's heart beat: the worker quits, the horse goes on): Redis knows no job in progress
  any more, but the horse holds the run's watch lock, so reconciliation leaves the run to
  it and no second job watches the launch.

Each run must still end FINISHED, and every metric point rank 0 measured must be stored
exactly once. Where Redis forgets the run's job (Redis restarted, the RQ worker killed),
one job must still have watched the run from start to end: reconciliation says it left
the run to its job, the run keeps its job id, and the RQ workers' log shows one job taken
for it. Rank 0 also writes its points to a JSON-lines file (`--metrics-file`), each
with the uid it posts, so "exactly once" is checked against the worker's own record,
point by point, not assumed; the same goes for rank 0's progress lines in the stored log.
The supervisor is paused (SIGSTOP) while a service it would restart at once is down, so
the outage is long enough for the reporter to hit it.

Also here: a rank of the real worker killed mid-run fails the run with a reason within
10 s; the collector's periodic reconciliation leaves a watched run alone while Redis is
down (it cannot know then whether the run's job lives); and `down` after a PostgreSQL
restart still stops the active run and marks it FAILED (the supervisor's own connection).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import redis
from rq import Worker

from mlbench_master.runs.reconcile import WATCHED_UNSEEN
from mlbench_worker.shared.evaluation import GRADED_PREFIX
from tests.e2e.live import LiveMaster, script, start_master
from tests.e2e.live import wait_until as _wait_until
from tests.services import free_port, postgres_server, restart_postgres

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

BUDGET = 14  # seconds of training: long enough to span a fault of a few seconds
OUTAGE = 4.0  # seconds a component stays down (the reporter posts every 2 s)
COMMAND = (
    "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --train-images 512"
    " --test-images 256 --max-epochs 1000 --time-budget {budget} --target paper --threads 1"
    " --log-every 1 --metrics-file {points}"
)


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[str]:
    """A PostgreSQL server for this module alone: its tests stop and start it."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module")
def fault_master(own_postgres, tmp_path_factory) -> Iterator[LiveMaster]:
    live = start_master(own_postgres, tmp_path_factory.mktemp("faults-home"))
    yield live
    live.down()


@pytest.fixture
def master(fault_master) -> LiveMaster:
    """The master with every service answering and no run active (whatever a test left)."""
    _wait_until(lambda: _answers(fault_master), 60, "the master does not answer")
    for run in fault_master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            fault_master.delete(f"/api/runs/{run['id']}/")
    return fault_master


# -- helpers -------------------------------------------------------------------------------


def _answers(master: LiveMaster) -> bool:
    try:
        return master.get("/api/runs/").status_code == 200
    except OSError:
        return False


def _start_training(master: LiveMaster, tmp_path: Path, name: str) -> tuple[dict, Path]:
    """A real 2-rank training run, returned once rank 0's first points are stored."""
    points = tmp_path / "points.jsonl"
    command = COMMAND.format(budget=BUDGET, points=points)
    run = master.create_run(
        name=name,
        custom_image_command=command,
        run_all_nodes=True,
        time_limit=300,
        test_examples=256,
    )
    _wait_until(
        lambda: _stored(master, run["id"]) or _ended(master, run["id"]),
        120,
        f"run {run['id']} stored no metric point",
    )
    assert master.run(run["id"])["state"] == "STARTED", master.run(run["id"])
    return run, points


def _stored(master: LiveMaster, run_id: int) -> int:
    """How many points of the run the database holds (read directly, not through the API)."""
    with psycopg.connect(master.database_url, connect_timeout=5) as conn:
        return conn.execute(
            "SELECT count(*) FROM api_metric WHERE run_id = %s", [run_id]
        ).fetchone()[0]


def _ended(master: LiveMaster, run_id: int) -> bool:
    return master.run(run_id)["state"] not in ("INITIALIZED", "STARTED")


def _still_running(master: LiveMaster, run_id: int) -> None:
    """The fault is over and the run goes on: it spanned the fault, as the test intends."""
    run = master.run(run_id)
    assert run["state"] == "STARTED", (
        f"run {run_id} ended ({run['state']}: {run['reason']}) before the fault was over; "
        "the test needs a longer BUDGET to mean anything"
    )


def _finished(master: LiveMaster, run_id: int) -> dict:
    done = master.wait_state(run_id, ("FINISHED", "FAILED", "CANCELLED"), timeout=180)
    assert done["state"] == "FINISHED", f"{done['reason']}\n{master.log_text(run_id)[-3000:]}"
    assert done["exit_code"] == 0
    return done


def _assert_stored_exactly_once(master: LiveMaster, run: dict, points: Path) -> None:
    """Every point rank 0 measured is stored once, with its value; nothing else is stored."""
    measured: dict[str, tuple[str, float]] = {}
    summary = None
    for line in points.read_text().splitlines():
        record = json.loads(line)
        if record["type"] == "metric":
            measured[record["uid"]] = (record["name"], record["value"])
        elif record["type"] == "summary":
            summary = record
    assert measured, "rank 0 recorded no point"
    with psycopg.connect(master.database_url) as conn:
        stored_rows = conn.execute(
            "SELECT uid, name, value, metadata FROM api_metric WHERE run_id = %s", [run["id"]]
        ).fetchall()
    # The evaluator's grades are the master's own points: one for each evaluation rank 0
    # reported, however often its predictions were posted through the outage.
    graded = Counter(
        meta.get("step") for _, name, _, meta in stored_rows if name.startswith(GRADED_PREFIX)
    )
    reported = set(_steps_of(points, "val_accuracy"))
    assert set(graded) == set(reported), (
        f"graded steps {sorted(graded)}, reported {sorted(reported)}"
    )
    assert set(graded.values()) == {1}, f"a grade is stored more than once: {graded}"
    rows = [row[:3] for row in stored_rows if not row[1].startswith(GRADED_PREFIX)]
    stored = {uid: (name, value) for uid, name, value in rows}
    missing = measured.keys() - stored.keys()
    extra = stored.keys() - measured.keys()
    assert not missing, f"{len(missing)} of {len(measured)} measured points were not stored"
    assert not extra, f"{len(extra)} stored points were never measured (uids {sorted(extra)[:3]})"
    assert len(rows) == len(measured), "a point is stored more than once"
    assert stored == measured, "a stored point differs from what rank 0 measured"
    # The API serves the same points: one per measured point, for every metric.
    served = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    served = {name: series for name, series in served.items() if not name.startswith(GRADED_PREFIX)}
    assert {name: len(series) for name, series in served.items()} == dict(
        Counter(name for name, _ in measured.values())
    )
    # The summary reached the master too.
    assert summary is not None, "rank 0 wrote no summary"
    delivered = master.run(run["id"])["summary"]
    for key in ("epochs", "final_val_accuracy", "stop_reason"):
        assert delivered.get(key) == summary.get(key), (key, delivered, summary)


def _steps_of(points: Path, name: str) -> list:
    """The steps of rank 0's recorded points called `name`."""
    records = (json.loads(line) for line in points.read_text().splitlines())
    return [
        r["metadata"].get("step") for r in records if r["type"] == "metric" and r["name"] == name
    ]


def _assert_log_stored_once(master: LiveMaster, run_id: int) -> None:
    """Rank 0's progress lines are in the stored log once each, none missing, to the end."""
    text = master.log_text(run_id)
    steps = [int(n) for n in re.findall(r"^step +(\d+) +epoch", text, flags=re.MULTILINE)]
    assert steps, "no progress line stored"
    doubled = [n for n, count in Counter(steps).items() if count > 1]
    assert not doubled, f"log lines stored twice: steps {doubled[:5]}"
    assert sorted(steps) == list(range(1, max(steps) + 1)), "log lines are missing"
    assert "mlbench result" in text, "the end of the output is missing"


def _assert_reporter_retried(master: LiveMaster, run_id: int, problem: str) -> None:
    """Rank 0's reporter says (on stderr, stored with the run's log) when posting fails
    and when it works again: proof that the outage met the ranks while they posted."""
    text = master.log_text(run_id)
    assert re.search(rf"posting to \S+ failed \({problem}\); retrying", text), text[-3000:]
    assert "works again (after" in text, text[-3000:]


def _job_id(master: LiveMaster, run_id: int) -> str:
    with psycopg.connect(master.database_url, connect_timeout=5) as conn:
        return conn.execute("SELECT job_id FROM api_run WHERE id = %s", [run_id]).fetchone()[0]


def _service_log(master: LiveMaster, name: str) -> str:
    """What a service of the master wrote (the supervisor's own lines are "launcher")."""
    return (master.home / "logs" / f"{name}.log").read_text(errors="replace")


def _assert_one_job_watched(master: LiveMaster, run_id: int, job_id: str) -> None:
    """Redis forgot the run's job mid-run, yet one job watched the run from start to end:
    reconciliation left the run to it (it holds the run's watch lock), queued no other (the
    run keeps its job id), and the RQ workers took one job for the run, not two."""
    reconciled = re.findall(
        rf"^reconciled run {run_id}: (.*)$", _service_log(master, "launcher"), re.MULTILINE
    )
    assert reconciled, "the supervisor did not reconcile after the fault"
    assert set(reconciled) == {WATCHED_UNSEEN}, reconciled
    assert _job_id(master, run_id) == job_id, "reconciliation queued the run's job again"
    taken = re.findall(rf"^Worker \S+: runs: run {run_id}: ", _service_log(master, "rq-runs"),
                       re.MULTILINE)  # fmt: skip
    assert len(taken) == 1, f"{len(taken)} jobs were taken for run {run_id}"


def _last_pod_point(master: LiveMaster) -> int:
    with psycopg.connect(master.database_url) as conn:
        row = conn.execute("SELECT max(id) FROM api_metric WHERE pod_name IS NOT NULL").fetchone()
    return row[0] or 0


def _pid_of(master: LiveMaster, service: str) -> int:
    return master.state()["processes"][service]


@contextlib.contextmanager
def _supervisor_paused(master: LiveMaster) -> Iterator[None]:
    """Hold the supervisor (SIGSTOP), so a service killed meanwhile stays down until resumed."""
    supervisor = master.state()["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(supervisor, signal.SIGCONT)


def _kill(pid: int) -> None:
    """SIGKILL `pid` and wait until it is dead (a zombie while its paused parent holds it)."""
    proc = psutil.Process(pid)
    proc.kill()
    _wait_until(
        lambda: not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE,
        10,
        f"process {pid} did not die",
    )


# -- the faults ----------------------------------------------------------------------------


def test_postgresql_restarted_mid_run(master, own_postgres, tmp_path):
    run, points = _start_training(master, tmp_path, "postgres-restart")
    restart_postgres(own_postgres, down_for=OUTAGE)
    before = _last_pod_point(master)
    _still_running(master, run["id"])  # the web server answers again at once
    _finished(master, run["id"])
    # Rank 0's posts failed meanwhile (HTTP 503: no database) and were retried ...
    _assert_reporter_retried(master, run["id"], "HTTP 503")
    # ... nothing it measured was lost or stored twice, nor any line of output.
    _assert_stored_exactly_once(master, run, points)
    _assert_log_stored_once(master, run["id"])
    # The collector outlived the outage too: it stores pod readings again.
    _wait_until(lambda: _last_pod_point(master) > before, 30, "no pod metrics after the restart")


def test_redis_restarted_mid_run(master, tmp_path):
    run, points = _start_training(master, tmp_path, "redis-restart")
    job = _job_id(master, run["id"])
    old = _pid_of(master, "redis")
    with _supervisor_paused(master):
        _kill(old)
        time.sleep(OUTAGE)
    _wait_until(lambda: _pid_of(master, "redis") != old, 30, "Redis was not started again")
    _still_running(master, run["id"])
    _finished(master, run["id"])
    _assert_stored_exactly_once(master, run, points)
    _assert_log_stored_once(master, run["id"])
    # Its job done, the RQ worker was started again, registered in the new Redis (where
    # reconciliation looks for the jobs in progress) ...
    conn = redis.Redis.from_url(master.state()["redis_url"])
    _wait_until(lambda: Worker.all(connection=conn), 60, "no RQ worker registered in Redis")
    # ... the new Redis knew no job of the run, yet only its first job watched it ...
    _assert_one_job_watched(master, run["id"], job)
    # ... and the master takes runs again.
    again = master.create_run(name="after-redis", custom_image_command="python -c pass")
    done = master.wait_state(again["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "FINISHED", done["reason"]


def test_web_server_killed_while_ranks_post(master, tmp_path):
    run, points = _start_training(master, tmp_path, "web-restart")
    old = _pid_of(master, "web")
    with _supervisor_paused(master):
        _kill(old)
        time.sleep(OUTAGE)
    _wait_until(lambda: _answers(master), 60, "the web server was not started again")
    assert _pid_of(master, "web") != old
    _finished(master, run["id"])
    # Rank 0's posts met the outage and were retried ...
    _assert_reporter_retried(master, run["id"], "ConnectionError")
    # ... and nothing it measured was lost or stored twice.
    _assert_stored_exactly_once(master, run, points)
    _assert_log_stored_once(master, run["id"])


def test_rq_worker_killed_while_its_work_horse_watches_the_run(master, tmp_path):
    run, points = _start_training(master, tmp_path, "rq-worker-killed")
    job = _job_id(master, run["id"])
    worker = psutil.Process(_pid_of(master, "rq-runs"))
    horses = worker.children()  # RQ's work horse, running the run's job
    assert horses, "the RQ worker runs no job"
    _kill(worker.pid)
    _wait_until(lambda: _pid_of(master, "rq-runs") != worker.pid, 30, "no new RQ worker")
    assert all(horse.is_running() for horse in horses), "the work horse died with its worker"
    _still_running(master, run["id"])
    _finished(master, run["id"])
    # The orphaned horse watched the run to its end, alone, and then ended ...
    _wait_until(
        lambda: not any(h.is_running() and h.status() != psutil.STATUS_ZOMBIE for h in horses),
        60,
        "the work horse did not end with its run",
    )
    _assert_one_job_watched(master, run["id"], job)
    # ... and each line is stored once, as is each point.
    _assert_stored_exactly_once(master, run, points)
    _assert_log_stored_once(master, run["id"])


def test_rank_killed_fails_the_run_with_a_reason_quickly(master, tmp_path):
    """A real worker rank killed mid-training (blocked peers in an all-reduce): FAILED with
    the rank and its signal within 10 s, every process of the run gone."""
    run, _ = _start_training(master, tmp_path, "rank-killed")
    master.ranks(run["id"])[1].kill()
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=10)
    assert done["state"] == "FAILED"
    assert "rank 1 exited with code 137 (killed: out of memory?)" in done["reason"], (
        master.log_text(run["id"])[-3000:]
    )
    left = [p for p in master.rank_processes(run["id"]) if p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes of run {run['id']} still alive: {left}"


@pytest.mark.django_db
def test_reconciliation_while_redis_is_down_leaves_a_watched_run_alone(settings, tmp_path):
    """The collector's round finds Redis down (killed, not yet back): it cannot tell whether
    the run's job lives, so the run and its ranks are left alone, not failed."""
    import datetime as dt

    from mlbench_master.api.models import Run
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.collector import collector_loop

    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.RQ_QUEUES = {"runs": {"URL": f"redis://127.0.0.1:{free_port()}/0"}}
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    run = Run.objects.create(
        name="watched",
        state=Run.STARTED,
        num_workers=1,
        custom_image_command=script("sleeper.py") + " 60",
        job_id="a-job-redis-forgot",
        started_at=long_ago,
    )
    Run.objects.filter(pk=run.pk).update(created_at=long_ago)
    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, execution.record)
    try:
        rounds = iter([False, True])
        collector_loop(interval=0, stop=lambda: next(rounds), reconcile_every=0)
        run.refresh_from_db()
        assert run.state == Run.STARTED, run.reason
        assert driver.is_running(lifecycle.run_spec(run))
    finally:
        driver.cancel(lifecycle.run_spec(run))


def test_down_after_a_database_restart_still_stops_the_run_and_says_so(master, own_postgres):
    """The supervisor's own database connection, idle since start-up, was cut by the
    restart: `down` must still mark the active run FAILED and stop its ranks."""
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    _wait_until(lambda: len(master.ranks(run["id"])) == 2, 60, "no ranks started")
    restart_postgres(own_postgres, down_for=0.5)
    try:
        master.down()
        left = [p for p in master.rank_processes(run["id"]) if p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"processes of run {run['id']} still alive: {left}"
        with psycopg.connect(master.database_url) as conn:
            state, reason = conn.execute(
                "SELECT state, reason FROM api_run WHERE id = %s", [run["id"]]
            ).fetchone()
        assert (state, reason) == ("FAILED", "the master was stopped during the run")
    finally:
        master.up()
