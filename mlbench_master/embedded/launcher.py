"""The user's commands for the embedded master: `up`, `down`, `status`.

Why a module of its own: these run in the user's shell (through `mlbench up|down|status`
or `python -m mlbench_master`), find a master started earlier through MLBENCH_HOME/
master.json, and either run a Supervisor in the foreground, start one in the background
and wait until it answers, or signal it to stop. State lives in MLBENCH_HOME/master.json
(pids, URL) so `down` and `status` work from any shell and a second `up` finds the first.
Ctrl-C, SIGTERM or `down` stop everything that was started, and a run still going is
stopped and marked FAILED. `down` prints what the stop could not record (a run the database
did not let it mark: the next start settles it), and stops itself what outlived the
supervisor, found by the marker every process of the master carries.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlbench_master.cluster.local.driver import stop_launches
from mlbench_master.embedded.procs import (
    EVERY_ADDRESS,
    NotAnAddressHere,
    http_ok,
    listen_host,
    pid_alive,
    port_free,
    stop_marked,
    stop_pid,
)
from mlbench_master.embedded.shutdown import MASTER_MARK, read_report
from mlbench_master.embedded.state import home, log_dir, read_state, running_state, state_path
from mlbench_master.embedded.supervisor import Supervisor, login_link
from mlbench_master.runs import stopping, unsettled
from mlbench_worker.shared.localhost import free_port

DEFAULT_PORT = 8000
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 90.0  # the supervisor's stop waits at most ~60 s on what is down


def up(port: int | None, detach: bool) -> int:
    state = running_state()
    if state:
        print(
            f"mlbench master is already running at {state['url']}/ (pid {state['pid']}); "
            "stop it with `mlbench down`"
        )
        return 0
    _clean_stale()
    try:
        port_free(0)
    except NotAnAddressHere as error:
        print(f"{error}: give one it has (ip -brief address), or 0.0.0.0 for all", file=sys.stderr)
        return 2
    if port is None:
        port = (
            DEFAULT_PORT
            if port_free(DEFAULT_PORT)
            else free_port("" if listen_host() in EVERY_ADDRESS else listen_host())
        )
    elif not port_free(port):
        print(
            f"port {port} on {listen_host()} is in use: pick another with --port, "
            "or leave --port out to get a free one",
            file=sys.stderr,
        )
        return 2
    if not detach:
        return Supervisor(port).run()
    return _start_detached(port)


def _start_detached(port: int) -> int:
    home().mkdir(parents=True, exist_ok=True)
    log_dir().mkdir(parents=True, exist_ok=True)
    log_file = log_dir() / "launcher.log"
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlbench_master", "up", "--port", str(port), "--quiet"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_file.read_text(errors="replace").splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr)
            print(f"mlbench master failed to start; full log: {log_file}", file=sys.stderr)
            return 1
        state = read_state()
        if state and state.get("pid") == proc.pid and state.get("ready"):
            if http_ok(state["url"] + "/"):
                print(f"mlbench master running: dashboard {state['url']}/")
                for problem in state.get("problems") or []:
                    print(f"cluster problem ({state.get('cluster')}): {problem}")
                print(f"sign in (once) at {login_link()}")
                print(f"logs in {log_dir()}; stop it with `mlbench down`")
                return 0
        time.sleep(0.3)
    print(f"mlbench master not ready after {READY_TIMEOUT:.0f} s; see {log_file}", file=sys.stderr)
    stop_pid(proc.pid, proc)
    return 1


def _clean_stale() -> None:
    """Processes a master that died without cleaning up left behind (by recorded pid)."""
    state = read_state()
    if not state:
        return
    for pid in (state.get("processes") or {}).values():
        if pid_alive(pid) and _is_ours(pid):
            stop_pid(pid, timeout=5)
    with contextlib.suppress(OSError):
        state_path().unlink()


def _is_ours(pid: int) -> bool:
    """Whether `pid` still is a service of an embedded master (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return "mlbench_master" in cmdline or "redis-server" in cmdline


def down() -> int:
    state = read_state()
    if not state:
        print(f"no mlbench master is running here (MLBENCH_HOME={home()})")
        return 0
    pid = state.get("pid")
    running = pid_alive(pid)
    if running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            print(f"the master did not stop within {STOP_TIMEOUT:.0f} s: killing it")
            os.kill(pid, signal.SIGKILL)
    lines = read_report(pid)
    if lines is None:
        why = "did not finish its stop" if running else "was not running"
        lines = [f"the master's supervisor (pid {pid}) {why}: stopping what it left"]
    _clean_stale()
    lines += _stop_leftovers(state)
    for line in lines:
        print(line)
    print(f"mlbench master stopped ({state.get('url')})")
    return 1 if any(line.startswith(CANNOT_STOP) for line in lines) else 0


CANNOT_STOP = "could not stop"


def _stop_leftovers(state: dict) -> list[str]:
    """What outlived the supervisor's stop (it was killed, hung, or never stopped): every
    process carrying the master's marker and, on the local cluster, every launch and the
    slots' network. Runs found then are recorded for the next start to settle."""
    where = Path(state.get("home") or home())
    lines = []
    runs: list[str] = []
    if state.get("cluster", "local") == "local":  # first: the launches say their runs
        try:
            runs = stop_launches(where)
        except Exception as error:  # noqa: BLE001 - said, and the rest goes on
            lines.append(f"{CANNOT_STOP} the local launches or their slots: {error}")
    found, left = stop_marked(MASTER_MARK, str(where))
    if runs:
        unsettled.record(where, runs, stopping.LEFT_BY_SUPERVISOR)
        lines += [
            f"run {run}'s processes outlived the master's stop and were stopped now; if it "
            "is still active, it will be settled at the next start"
            for run in runs
        ]
    if found:
        lines.append(f"stopped {len(found)} process(es) the master left: pids {found}")
    if left:
        lines.append(f"{CANNOT_STOP} these processes of the master: pids {left}")
    return lines


def status() -> int:
    state = running_state()
    if not state:
        print(f"mlbench master is not running (MLBENCH_HOME={home()}); start it with `mlbench up`")
        return 3
    answering = http_ok(state["url"] + "/")
    print(f"mlbench master running at {state['url']}/ (pid {state['pid']})")
    print(f"  cluster: {state.get('cluster', 'local')}")
    for problem in state.get("problems") or []:
        print(f"  cluster problem at start: {problem}")
    print(f"  web server: {'answering' if answering else 'NOT answering'}")
    for name, pid in sorted((state.get("processes") or {}).items()):
        print(f"  {name}: pid {pid} {'running' if pid_alive(pid) else 'NOT running'}")
    print(f"  redis: {state.get('redis_url')}")
    print(f"  logs: {state.get('logs')}")
    return 0 if answering else 1
