"""Stopping stops everything: `mlbench down` with a service down mid-run.

An embedded master on a PostgreSQL server of this module's own (stopping it disturbs no
other test) runs a real 2-rank training run in worker slots that are network namespaces.
Mid-run one service goes away and stays away while `mlbench down` runs:

- PostgreSQL is stopped: the run cannot be marked, so `down` must say so, name the run,
  and the next `mlbench up` (PostgreSQL back) must settle it FAILED with the reason;
- Redis is stopped (SIGSTOP: it holds every connection without answering, and the
  supervisor, seeing it alive, does not replace it): the run is marked at `down`;
- the supervisor itself is killed: `down` stops what it left, and the next start settles
  the run.

Either way no process carrying the master's markers (its MLBENCH_HOME in the environment)
and no namespace, link or hosts file of its slots may be left. The slots need root
(CAP_NET_ADMIN, CAP_SYS_ADMIN): without it these tests skip with the reason, and fail
under CI (CI=true), where the suite runs as root.

Also here: `python -m mlbench_master stop-runs`, the master pod's preStop hook, run against
a real local launch (no namespaces needed).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from mlbench_master.cluster.local import network, slots
from mlbench_master.runs.stopping import LEFT_BY_SUPERVISOR, MASTER_STOPPED, SETTLED_AT_START
from tests.e2e.live import ROOT, LiveMaster, script, start_master, wait_until
from tests.services import pg_bindir, postgres_server

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# Real training, long enough to outlast the test: the run must still be going at `down`.
COMMAND = (
    "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --train-images 512"
    " --test-images 256 --max-epochs 1000 --time-budget 600 --target paper --threads 1"
    " --log-every 1"
)
MARKERS = ("MLBENCH_HOME", "MLBENCH_LOCAL_CLUSTER", "MLBENCH_EMBEDDED_MASTER")


class OwnPostgres:
    """A PostgreSQL server for this module alone, which its tests stop and start."""

    def __init__(self, url: str) -> None:
        self.url = url
        with psycopg.connect(url) as conn:
            self.data = Path(conn.execute("SHOW data_directory").fetchone()[0])

    def _pg_ctl(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        pg_ctl = str(pg_bindir() / "pg_ctl")
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(self.data), *args], check=True, capture_output=True
        )

    def stop(self) -> None:
        """A fast stop: every open connection is cut, new ones are refused."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Started again with the options it had (`restart` reads postmaster.opts)."""
        if not self.answers():
            self._pg_ctl("-l", str(self.data.parent / "server.log"), "-w", "restart")

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=3):
                return True
        except psycopg.OperationalError:
            return False


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    with postgres_server() as url:
        yield OwnPostgres(url)


@pytest.fixture
def slot_master(own_postgres, tmp_path) -> Iterator[LiveMaster]:
    """A fresh master whose runs get network namespaces (MLBENCH_LOCAL_NETWORK=namespaces:
    a run fails rather than share the machine's network). Whatever a failed test left of
    it is removed afterwards: the machine is shared."""
    missing = network.missing_capability()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"worker slot networks cannot be built under CI: {missing}")
        pytest.skip(f"worker slot networks need root: {missing}")
    home = tmp_path / "home"
    live = start_master(own_postgres.url, home, env_extra={"MLBENCH_LOCAL_NETWORK": "namespaces"})
    try:
        yield live
    finally:
        own_postgres.start()
        live.down()
        for proc in _marked(home):
            proc.kill()
        slots.close_slots(home)


# -- helpers -------------------------------------------------------------------------------


def _marked(home: Path) -> list[psutil.Process]:
    """Live processes with one of the master's markers set to its home in their environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if any(env.get(name) == str(home) for name in MARKERS):
            found.append(proc)
    return found


def _described(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {' '.join(proc.cmdline())[:90]}")
        except psutil.Error:
            continue
    return out


def _slot_objects(home: Path) -> list[str]:
    """Every namespace, link and hosts file of this home's slots that exists now."""
    tag = network.home_tag(home)
    namespaces, links = network.existing(tag)
    return namespaces + links + [str(p) for p in network.NETNS_ETC.glob(f"mlb-{tag}-*")]


def _left_behind(home: Path) -> list[str]:
    return _described(_marked(home)) + _slot_objects(home)


def _start_training(master: LiveMaster) -> dict:
    """A real 2-rank training run, returned once both ranks train inside their slots."""
    run = master.create_run(
        name="stopped-with-the-master",
        custom_image_command=COMMAND,
        run_all_nodes=True,
        time_limit=900,
        test_examples=256,
    )
    wait_until(
        lambda: len(master.ranks(run["id"])) == 2 or master.run(run["id"])["state"] == "FAILED",
        180,
        f"run {run['id']}'s ranks did not start",
    )
    wait_until(lambda: "step" in master.log_text(run["id"]), 120, "no training step logged")
    started = master.run(run["id"])
    assert started["state"] == "STARTED", started
    return run


def _everything_runs(master: LiveMaster, run_id: int) -> dict[str, int]:
    """What `down` must stop exists before it, so an empty left-over list means something;
    the supervisor's and the services' pids. (Redis is found by its pid: it writes its
    process title over its environment, so no marker can be read from it.)"""
    commands = " ".join(" ".join(p.cmdline()) for p in _marked(master.home))
    for part in ("rqworker", "collector", " web ", "mlbench_worker", "prted", "relay"):
        assert part in commands, f"{part!r} is not running: {commands[:2000]}"
    tag = network.home_tag(master.home)
    assert set(network.existing(tag)[0]) == {f"mlb-{tag}-0", f"mlb-{tag}-1"}
    assert len(master.ranks(run_id)) == 2
    state = master.state()
    pids = {"supervisor": state["pid"], **state["processes"]}
    assert set(pids) == {"supervisor", "redis", "rq-runs", "collector", "web"}, pids
    assert all(psutil.pid_exists(pid) for pid in pids.values()), pids
    return pids


def _alive(pids: dict[str, int]) -> list[str]:
    alive = []
    for name, pid in pids.items():
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{name} ({pid})")
        except psutil.NoSuchProcess:
            continue
    return alive


def _stored_run(master: LiveMaster, run_id: int) -> tuple[str, str]:
    with psycopg.connect(master.database_url) as conn:
        return conn.execute("SELECT state, reason FROM api_run WHERE id = %s", [run_id]).fetchone()


# -- the tests -----------------------------------------------------------------------------


def test_down_with_postgresql_stopped_stops_everything_and_the_next_start_settles_the_run(
    slot_master, own_postgres
):
    master = slot_master
    run = _start_training(master)
    services = _everything_runs(master, run["id"])
    own_postgres.stop()

    done = master.launcher("down", check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    assert _left_behind(master.home) == [], done.stdout
    assert _alive(services) == [], done.stdout
    said = done.stdout
    assert (
        f"run {run['id']} was stopped but could not be marked FAILED: the database did not "
        "answer (" in said
    ), said
    assert "it will be settled at the next start" in said, said
    assert said.rstrip().endswith(f"mlbench master stopped ({master.url})"), said

    own_postgres.start()
    assert _stored_run(master, run["id"])[0] == "STARTED"  # nothing could record its end
    master.up()  # reconciles before it serves
    settled = master.run(run["id"])
    assert (settled["state"], settled["reason"]) == ("FAILED", SETTLED_AT_START)
    assert not (master.home / "unsettled-runs.json").exists()
    # The master works again: a new run gets slots and ends by itself.
    again = master.create_run(name="after", custom_image_command="python -c pass")
    finished = master.wait_state(again["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=120)
    assert finished["state"] == "FINISHED", finished["reason"]


def test_down_with_redis_stopped_stops_everything_and_marks_the_run(slot_master):
    master = slot_master
    run = _start_training(master)
    services = _everything_runs(master, run["id"])
    os.kill(services["redis"], signal.SIGSTOP)  # alive to the supervisor, answering nobody

    done = master.launcher("down", check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    assert _left_behind(master.home) == [], done.stdout
    assert _alive(services) == [], done.stdout
    assert f"run {run['id']} was stopped and marked FAILED ({MASTER_STOPPED})" in done.stdout
    assert _stored_run(master, run["id"]) == ("FAILED", MASTER_STOPPED)
    master.up()
    assert master.run(run["id"])["state"] == "FAILED"


def test_down_after_the_supervisor_was_killed_stops_what_it_left(slot_master):
    master = slot_master
    run = _start_training(master)
    services = _everything_runs(master, run["id"])
    psutil.Process(services["supervisor"]).kill()  # no stop of its own: all is left behind

    done = master.launcher("down", check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    assert _left_behind(master.home) == [], done.stdout
    assert _alive(services) == [], done.stdout
    said = done.stdout
    assert f"the master's supervisor (pid {services['supervisor']}) was not running" in said
    assert f"run {run['id']}'s processes outlived the master's stop and were stopped" in said
    master.up()
    settled = master.run(run["id"])
    assert (settled["state"], settled["reason"]) == ("FAILED", LEFT_BY_SUPERVISOR)


# -- the master pod's preStop hook, on the local driver -------------------------------------


@pytest.mark.django_db(transaction=True)
def test_stop_runs_command_stops_the_run_and_marks_it(settings, tmp_path, test_database_url):
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.drivers import get_driver
    from mlbench_master.cluster.local import launch_processes
    from mlbench_master.cluster.mpirun import driver_argv, rank_environment
    from mlbench_master.runs import lifecycle

    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_LOCAL_NETWORK = "off"
    run = Run.objects.create(
        name="pod-ends", state=Run.STARTED, num_workers=2, custom_image_command=script("sleeper.py")
    )
    driver = get_driver()
    spec = lifecycle.run_spec(run)
    argv = driver_argv(driver, spec, driver.prepare(spec))
    execution = driver.launch(spec, argv, rank_environment(spec, "http://127.0.0.1:9", "tok"))
    lifecycle.record_launch(run, execution.record)
    wait_until(lambda: len(launch_processes(tmp_path, run.pk)) >= 3, 60, "no ranks started")
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url,
        "MLBENCH_HOME": str(tmp_path),
        "MLBENCH_CLUSTER": "local",
        "MLBENCH_LOCAL_NETWORK": "off",
        "MLBENCH_SECRET_KEY": secrets.token_urlsafe(32),
        "PYTHONPATH": str(ROOT),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlbench_master", "stop-runs"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            done.stdout.strip() == f"run {run.pk} was stopped and marked FAILED ({MASTER_STOPPED})"
        )
        assert launch_processes(tmp_path, run.pk) == []
        run.refresh_from_db()
        assert (run.state, run.reason) == (Run.FAILED, MASTER_STOPPED)
    finally:
        execution.kill()
