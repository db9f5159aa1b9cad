"""The processes of local launches: finding them by their markers, and killing them all.

Open MPI puts each rank in a process group of its own, so killing mpirun's process group
is not enough. Every process of a launch carries marker variables in its environment
(`MLBENCH_LOCAL_CLUSTER` = the master's home, `MLBENCH_RUN_ID`, `MLBENCH_LAUNCH_ID`) and
stays in the wrapper's session; processes are found by the markers, from any process of
the master, so no rank is ever left behind. The session id only helps while its leader is
verifiably our wrapper: pids get reused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from mlbench_master.cluster.base import ClusterError

# Environment markers carried by every process of a local launch.
CLUSTER_MARK = "MLBENCH_LOCAL_CLUSTER"
LAUNCH_MARK = "MLBENCH_LAUNCH_ID"
RUN_MARK = "MLBENCH_RUN_ID"
RANK_VAR = "OMPI_COMM_WORLD_RANK"


def environ_of(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _leader_is(sid: int | None, created: float | None) -> bool:
    """Whether process `sid` is still the session leader our launch recorded (same start)."""
    if not sid or created is None:
        return False
    try:
        return abs(psutil.Process(sid).create_time() - float(created)) < 1.0
    except (psutil.Error, TypeError, ValueError):
        return False


def launch_processes(
    home: Path,
    run_id: int | str | None = None,
    sid: int | None = None,
    sid_created: float | None = None,
) -> list[psutil.Process]:
    """Live processes of local launches under `home` (optionally of one run).

    A process counts only when it carries our marker (`MLBENCH_LOCAL_CLUSTER` = `home`, and
    the run's id when one is given): a session id alone is never trusted, since a pid (and
    with it a session id) may be reused by an unrelated program once our launch is gone.
    Members of session `sid` whose environment cannot be read are added only while the
    session leader is verifiably our wrapper (its create time is `sid_created`).
    """
    home_str = str(home)
    session_ours = _leader_is(sid, sid_created)
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        env = environ_of(proc)
        if env:
            if env.get(CLUSTER_MARK) != home_str:
                continue
            if run_id is not None and env.get(RUN_MARK) != str(run_id):
                continue
        elif not (session_ours and _session_of(proc.pid) == sid):
            continue
        if is_alive(proc):
            found.append(proc)
    return found


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def rank_processes(home: Path) -> dict[tuple[str, int], list[psutil.Process]]:
    """Processes of local ranks under `home`, keyed by (run id, rank)."""
    ranks: dict[tuple[str, int], list[psutil.Process]] = {}
    for proc in launch_processes(home):
        env = environ_of(proc)
        if RANK_VAR not in env:
            continue
        try:
            rank = int(env[RANK_VAR])
        except ValueError:
            continue
        ranks.setdefault((env.get(RUN_MARK, ""), rank), []).append(proc)
    return ranks


def kill_processes(find: Callable[[], list[psutil.Process]], grace: float = 3.0) -> None:
    """SIGTERM what `find()` returns, SIGKILL what is left after `grace`; repeat until none.

    `find` is called again after each round, so a rank that mpirun was starting at the
    moment of the kill is caught too.
    """
    for attempt in range(5):
        procs = find()
        if not procs:
            return
        sig = signal.SIGTERM if attempt == 0 else signal.SIGKILL
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        alive = wait_gone(procs, grace if attempt == 0 else 2.0)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        wait_gone(alive, 2.0)
    leftover = [p for p in find() if is_alive(p)]
    if leftover:
        raise ClusterError(
            "could not stop local processes: " + ", ".join(str(p.pid) for p in leftover)
        )


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until `procs` are dead or zombies; return those still running.

    Deliberately not psutil.wait_procs: that reaps our own children, and the exit status
    of the mpirun wrapper must stay for its Popen to read.
    """
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if is_alive(p)]
    return alive
