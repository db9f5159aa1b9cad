"""Stopping an embedded master: everything it started, whatever else is down.

Why a module of its own: the order matters, and no step may wait on a service that is down
(the database, Redis, the web server):

1. the web server and the collector (no run is created, no reconciliation round runs);
2. the RQ worker is asked for a warm stop (ONE SIGTERM): it takes no new job;
3. the runs in progress are marked FAILED where the database answers (stopping.py);
4. the RQ worker's whole session: its work horse (in a process group of its own) ends by
   itself once its run is marked; one that cannot see that (no database) is killed;
5. the cluster driver stops every launch of this master and removes the slots' network,
   found without the database or Redis (stopping.py, the driver's stop_all);
6. Redis;
7. any process still carrying this master's marker (MASTER_MARK, which the supervisor puts
   in the environment of every service, so everything they start inherits it).

The report (stopping's lines, and anything that outlived it all) is printed and written to
MLBENCH_HOME/stopped.json, where `mlbench down` reads it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from mlbench_master.embedded.procs import signal_group, stop_marked, stop_sessions
from mlbench_master.embedded.state import stop_report_path
from mlbench_master.runs import jobqueue, stopping

MASTER_MARK = "MLBENCH_EMBEDDED_MASTER"  # value: the master's MLBENCH_HOME
SERVICE_GRACE = 5.0
JOB_GRACE = 20.0  # the run job ends by itself within seconds once its run is marked
JOB_GRACE_UNMARKED = 2.0  # the run could not be marked: the job would never see it end
# Redis does not answer: the job sees its run marked and stops its launch within seconds,
# then waits on Redis to record its own end, which nothing is left to read.
JOB_GRACE_NO_REDIS = 5.0
REDIS_PING_SECONDS = 1.0


def _services(children: dict[str, Any], *names: str) -> list[tuple[int, Any]]:
    found = []
    for name in names:
        child = children.get(name)
        if child is not None and child.proc is not None:
            found.append((child.proc.pid, child.proc))
    return found


def job_grace(marked: bool, redis_url: str | None) -> float:
    """How long the RQ worker's job may take to end by itself before it is killed."""
    if not marked:
        return JOB_GRACE_UNMARKED

    if redis_url and jobqueue.answers(redis_url, REDIS_PING_SECONDS):
        return JOB_GRACE
    return JOB_GRACE_NO_REDIS


def stop_master(children: dict[str, Any], home: Path, redis_url: str | None = None) -> list[str]:
    """Stop the master's services (`children`: name → Child) and everything they started;
    the report, one line each. `redis_url`: the master's Redis, asked whether it answers."""
    if "rq-runs" not in children:
        # Stopped before its services started (a failed start): no run is its own. A crashed
        # master's launch found now would be re-attached by the next start: left alone.
        survivors = stop_sessions(_services(children, *children), SERVICE_GRACE)
        return _finish([], survivors)
    survivors = stop_sessions(_services(children, "web", "collector"), SERVICE_GRACE)
    worker = _services(children, "rq-runs")
    for pid, proc in worker:
        if proc.poll() is None:
            signal_group(pid, signal.SIGTERM)
    report = stopping.StopReport()
    driver = stopping.get_driver_or_say(report)
    stopping.mark_runs_failed(report, driver)
    grace = job_grace(report.database_error is None, redis_url)
    survivors += stop_sessions(worker, grace, signalled=True)
    stopping.stop_launches(report, driver, home)
    survivors += stop_sessions(_services(children, "redis"), SERVICE_GRACE)
    _, left = stop_marked(MASTER_MARK, str(home))
    return _finish(report.lines(), survivors + left)


def _finish(lines: list[str], outlived: list[int]) -> list[str]:
    if outlived:
        lines.append(
            "could not stop these processes of the master (even with SIGKILL): "
            + ", ".join(map(str, sorted(set(outlived))))
        )
    write_report(lines)
    return lines


def write_report(lines: list[str]) -> None:
    """For `mlbench down`, which prints it once the supervisor (this process) is gone."""
    path = stop_report_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "lines": lines}, indent=2))
    tmp.replace(path)


def read_report(pid: int | None) -> list[str] | None:
    """The lines the stop of supervisor `pid` reported (then forgotten); None when it wrote
    none (it was killed, or was not running)."""
    path = stop_report_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("pid") != pid:
        return None
    path.unlink(missing_ok=True)
    return [str(line) for line in data.get("lines") or []]
