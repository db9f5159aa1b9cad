"""The faults of the chaos series, each done to the real thing: a signal to a process found
by its markers, a service restarted, the master killed and started again, a run deleted
through the API, a full disk, a link taken down.

Each injector gets the stage (what it acts on) and the planned fault (its kind, how long it
holds, a random number that picks among the targets), does it, and fills in what it hit:
`run_id` (the run it was aimed at, if any), `details` (e.g. which rank) or `skipped` (why
nothing was done: no target showed up in time, the machine cannot do it). The scheduler
(schedule.py) timestamps it around the call.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from tests.chaos.victims import Victims
from tests.e2e.live import LiveMaster
from tests.e2e.test_faults import _kill, _supervisor_paused, _wait_until
from tests.services import restart_postgres

TARGET_WAIT = 30.0  # seconds a fault waits for something to hit (a run with ranks)
BACK_WITHIN = 90.0  # seconds a restarted service may take to be back


@dataclass
class Fault:
    """One planned fault and, once injected, what it did."""

    n: int
    kind: str
    delay: float  # seconds after the previous fault ended
    hold: float  # seconds a pause, an outage, a full disk or a dropped link lasts
    pick: float  # in [0, 1): chooses among the targets found
    start: float | None = None  # wall clock (time.time()) when it began
    end: float | None = None  # ... and when it was over (the service back, the link up)
    run_id: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    skipped: str = ""

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Stage:
    """What the faults act on."""

    master: LiveMaster
    victims: Victims
    postgres_url: str
    log_dir: Path | None  # the runs' output folder, on a small filesystem of its own
    no_log_dir: str  # why there is none (the disk-full fault is skipped with it)
    restart: Callable[[], Any]  # `mlbench up` again after the master was killed
    unable: dict[str, str] = field(default_factory=dict)  # kinds that cannot be done: why


def active_run(master: LiveMaster) -> tuple[int, str] | None:
    """(id, state) of the master's active run, read from its database; None when none is
    active or the database does not answer."""
    try:
        with psycopg.connect(master.database_url, connect_timeout=3) as conn:
            row = conn.execute(
                "SELECT id, state FROM api_run WHERE state IN ('INITIALIZED', 'STARTED')"
            ).fetchone()
    except psycopg.Error:
        return None
    return (int(row[0]), str(row[1])) if row else None


def _started_run(stage: Stage) -> int | None:
    found = active_run(stage.master)
    return found[0] if found and found[1] == "STARTED" else None


def _wait_for(find: Callable[[], Any], timeout: float = TARGET_WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    return None


def _pick(items: list[Any], fault: Fault) -> Any:
    return sorted(items)[int(fault.pick * len(items))]


def _signal(proc: psutil.Process, sig: int) -> None:
    os.kill(proc.pid, sig)


def _stop_for(procs: list[psutil.Process], hold: float) -> None:
    """SIGSTOP `procs`, wait `hold` seconds, SIGCONT them (also when interrupted)."""
    stopped = []
    try:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                _signal(proc, signal.SIGSTOP)
                stopped.append(proc)
        time.sleep(hold)
    finally:
        for proc in stopped:
            with contextlib.suppress(ProcessLookupError):
                _signal(proc, signal.SIGCONT)


# -- a run's processes -----------------------------------------------------------------------


def _a_rank(stage: Stage, fault: Fault) -> tuple[int, int, psutil.Process] | None:
    def find() -> tuple[int, dict] | None:
        run = _started_run(stage)
        ranks = stage.victims.ranks(run) if run else {}
        return (run, ranks) if ranks else None

    found = _wait_for(find)
    if not found:
        fault.skipped = f"no run with live ranks within {TARGET_WAIT:.0f} s"
        return None
    run, ranks = found
    rank = _pick(list(ranks), fault)
    fault.run_id, fault.details["rank"] = run, rank
    fault.details["pid"] = ranks[rank].pid
    return run, rank, ranks[rank]


def rank_kill(stage: Stage, fault: Fault) -> None:
    found = _a_rank(stage, fault)
    if found:
        with contextlib.suppress(ProcessLookupError):
            _signal(found[2], signal.SIGKILL)


def rank_stop(stage: Stage, fault: Fault) -> None:
    found = _a_rank(stage, fault)
    if found:
        _stop_for([found[2]], fault.hold)


def _the_launcher(stage: Stage, fault: Fault) -> psutil.Process | None:
    def find() -> tuple[int, psutil.Process] | None:
        run = _started_run(stage)
        launcher = stage.victims.launcher(run) if run else None
        return (run, launcher) if launcher else None

    found = _wait_for(find)
    if not found:
        fault.skipped = f"no run with a live mpirun within {TARGET_WAIT:.0f} s"
        return None
    fault.run_id, fault.details["pid"] = found[0], found[1].pid
    return found[1]


def mpirun_kill(stage: Stage, fault: Fault) -> None:
    launcher = _the_launcher(stage, fault)
    if launcher:
        with contextlib.suppress(ProcessLookupError):
            _signal(launcher, signal.SIGKILL)


def mpirun_stop(stage: Stage, fault: Fault) -> None:
    launcher = _the_launcher(stage, fault)
    if launcher:
        _stop_for([launcher], fault.hold)


# -- the master's services -------------------------------------------------------------------


def _rq_worker(stage: Stage, fault: Fault) -> list[psutil.Process]:
    """The RQ worker and its work horse (the fork executing the run's job, in a process
    group of its own)."""
    pid = stage.victims.service("rq-runs")
    if pid is None:
        fault.skipped = "the master records no RQ worker"
        return []
    with contextlib.suppress(psutil.Error):
        worker = psutil.Process(pid)
        procs = [worker, *worker.children()]
        fault.details["pids"] = [p.pid for p in procs]
        found = active_run(stage.master)
        fault.run_id = found[0] if found else None
        return procs
    fault.skipped = f"the RQ worker (pid {pid}) is gone"
    return []


def rq_worker_kill(stage: Stage, fault: Fault) -> None:
    for proc in _rq_worker(stage, fault):
        with contextlib.suppress(ProcessLookupError):
            _signal(proc, signal.SIGKILL)
    if not fault.skipped:
        old = fault.details["pids"][0]
        _back(lambda: stage.victims.service("rq-runs") not in (None, old), "the RQ worker")


def rq_worker_stop(stage: Stage, fault: Fault) -> None:
    _stop_for(_rq_worker(stage, fault), fault.hold)


def _service(stage: Stage, fault: Fault, name: str) -> int | None:
    pid = stage.victims.service(name)
    if pid is None:
        fault.skipped = f"the master records no {name} process"
    found = active_run(stage.master)
    fault.run_id = found[0] if found else None
    fault.details["pid"] = pid
    return pid


def _back(check: Callable[[], bool], what: str) -> None:
    _wait_until(check, BACK_WITHIN, f"{what} was not started again")


def _outage(stage: Stage, fault: Fault, name: str) -> None:
    """Kill a service while the supervisor is paused, so it stays down `hold` seconds; the
    supervisor then starts it again."""
    pid = _service(stage, fault, name)
    if pid is None:
        return
    with _supervisor_paused(stage.master):
        _kill(pid)
        time.sleep(fault.hold)
    _back(lambda: stage.victims.service(name) not in (None, pid), name)


def web_kill(stage: Stage, fault: Fault) -> None:
    _outage(stage, fault, "web")


def web_stop(stage: Stage, fault: Fault) -> None:
    pid = _service(stage, fault, "web")
    if pid is not None:
        _stop_for([psutil.Process(pid)], fault.hold)


def redis_restart(stage: Stage, fault: Fault) -> None:
    _outage(stage, fault, "redis")


def postgres_restart(stage: Stage, fault: Fault) -> None:
    found = active_run(stage.master)
    fault.run_id = found[0] if found else None
    restart_postgres(stage.postgres_url, down_for=fault.hold)


def master_restart(stage: Stage, fault: Fault) -> None:
    """SIGKILL the supervisor, its services and what they started except the runs' own
    launches (which outlive the master by design), then `mlbench up` again."""
    found = active_run(stage.master)
    fault.run_id = found[0] if found else None
    state = stage.master.state()
    victims = [state["pid"], *state["processes"].values()]
    procs = []
    for pid in list(victims):
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            procs += [root] + [
                c for c in root.children(recursive=True) if not stage.victims.is_launch(c)
            ]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    fault.details["killed"] = len(procs)
    time.sleep(fault.hold)
    stage.restart()


# -- a run, the disk, the network ------------------------------------------------------------


def cancel(stage: Stage, fault: Fault) -> None:
    """DELETE the active run (a queued one when none is active) through the API."""
    found = active_run(stage.master)
    if found is None:
        listed = stage.master.get("/api/runs/")
        if listed.status_code != 200:  # a 503 while a service is down: nothing to pick from
            fault.skipped = f"the run list answered {listed.status_code}"
            return
        queued = [r for r in listed.json() if r["state"] == "QUEUED"]
        if not queued:
            fault.skipped = "no active or queued run"
            return
        found = (int(_pick([r["id"] for r in queued], fault)), "QUEUED")
    fault.run_id = found[0]
    response = stage.master.delete(f"/api/runs/{found[0]}/")
    fault.details.update(state=found[1], status=response.status_code)


def disk_full(stage: Stage, fault: Fault) -> None:
    """Fill the runs' output folder's filesystem to the last byte for `hold` seconds."""
    if stage.log_dir is None:
        fault.skipped = stage.no_log_dir
        return
    found = active_run(stage.master)
    fault.run_id = found[0] if found else None
    filler = stage.log_dir / "chaos-filler"
    written = 0
    try:
        with open(filler, "wb", buffering=0) as fh:  # unbuffered: ENOSPC comes from write()
            block = b"\0" * (1 << 20)
            while block:
                try:
                    written += fh.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    block = block[: len(block) // 2]
        fault.details["filled_bytes"] = written
        time.sleep(fault.hold)
    finally:
        filler.unlink(missing_ok=True)


def link_drop(stage: Stage, fault: Fault) -> None:
    """Take one slot's link (its veth's host end) down for `hold` seconds."""

    def find() -> tuple[int, list[str]] | None:
        run = _started_run(stage)
        links = stage.victims.links() if run else []
        return (run, links) if links else None

    found = _wait_for(find)
    if not found:
        fault.skipped = f"no run with slot links within {TARGET_WAIT:.0f} s"
        return
    fault.run_id, link = found[0], _pick(found[1], fault)
    fault.details["link"] = link
    subprocess.run(["ip", "link", "set", link, "down"], check=True, capture_output=True)
    try:
        time.sleep(fault.hold)
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=False, capture_output=True)


INJECTORS: dict[str, Callable[[Stage, Fault], None]] = {
    "rank-kill": rank_kill,
    "rank-stop": rank_stop,
    "mpirun-kill": mpirun_kill,
    "mpirun-stop": mpirun_stop,
    "rq-worker-kill": rq_worker_kill,
    "rq-worker-stop": rq_worker_stop,
    "web-kill": web_kill,
    "web-stop": web_stop,
    "redis-restart": redis_restart,
    "postgres-restart": postgres_restart,
    "master-restart": master_restart,
    "cancel": cancel,
    "disk-full": disk_full,
    "link-drop": link_drop,
}
KINDS = tuple(INJECTORS)
