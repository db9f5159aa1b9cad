"""Processes and ports of this machine, as the embedded master needs them.

Why a module of its own: the supervisor (stopping its children, waiting for Redis and the
web server) and the `down`/`status` commands (a master started from another shell) ask the
same questions: is this pid alive, stop this service with everything it started, which
processes carry this master's marker, is this port free, does something answer there.
Standard library only; no Django.

A service is stopped by its whole session, not only by its process group: each runs in a
session of its own, and what it starts may leave its group (RQ's work horse calls
setpgrp), so signalling the group alone left the horse, and the run it watched, behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import psutil

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.local.processes import (
    environ_of,
    is_alive,
    kill_processes,
    wait_gone,
)
from mlbench_worker.shared.localhost import LOOPBACK


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def stop_pid(pid: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    """Stop the service `pid` and everything in its session (see `stop_sessions`)."""
    stop_sessions([(pid, proc)], timeout)


def signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group of `pid` (services lead their own), else to `pid` alone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, session...)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (zombies left out): a service and all it started
    that did not leave its session (Linux keeps a session's id from being reused while any
    member lives, so this never names a stranger)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields and fields[0] != "Z" and fields[3] == str(sid):
            members.append(int(entry.name))
    return members


def stop_sessions(
    services: list[tuple[int, subprocess.Popen | None]],
    grace: float = 10.0,
    signalled: bool = False,
) -> list[int]:
    """Stop services and everything in their sessions; returns the pids that outlived it.

    Each service's process group gets ONE SIGTERM (unless `signalled`: the caller sent it):
    an RQ worker takes it as a warm stop and finishes its job, which the master's stop has
    ended meanwhile. After `grace` seconds every process still in the sessions gets SIGKILL,
    the work horse of an RQ worker included (RQ ignores a second SIGTERM within a second,
    so a cold stop cannot be asked for reliably).
    """
    if not signalled:
        for pid, _ in services:
            signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        for _, proc in services:
            if proc is not None:
                proc.poll()  # reap: a zombie child is not alive
        if not any(session_members(pid) for pid, _ in services):
            break
        time.sleep(0.1)
    left = [member for pid, _ in services for member in session_members(pid)]
    for member in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)
    for _, proc in services:
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
    killed = []
    for member in left:
        with contextlib.suppress(psutil.Error):
            killed.append(psutil.Process(member))
    return [proc.pid for proc in wait_gone(killed, 5.0)]


def marked_processes(name: str, value: str) -> list[psutil.Process]:
    """Live processes whose environment has `name`=`value` (this process left out)."""
    return [
        proc
        for proc in psutil.process_iter()
        if proc.pid != os.getpid() and environ_of(proc).get(name) == value and is_alive(proc)
    ]


def stop_marked(name: str, value: str, grace: float = 5.0) -> tuple[list[int], list[int]]:
    """Stop every process carrying the marker `name`=`value` as the local driver stops a
    launch (kill_processes: TERM, then KILL after `grace`, found again each round); returns
    (the pids found, those still alive)."""
    found: set[int] = set()

    def find() -> list[psutil.Process]:
        procs = marked_processes(name, value)
        found.update(proc.pid for proc in procs)
        return procs

    with contextlib.suppress(ClusterError):  # what outlived it is answered below
        kill_processes(find, grace)
    return sorted(found), [proc.pid for proc in marked_processes(name, value)]


# The address the embedded master's web server listens on (`up --host`): loopback unless
# workers on other hosts must reach it (a Slurm cluster's nodes). The detached master
# started by `up --detach` inherits it from the environment.
LISTEN_HOST_ENV = "MLBENCH_LISTEN_HOST"


def listen_host() -> str:
    """Where the web server listens: `up --host`, else loopback (only this machine)."""
    return os.environ.get(LISTEN_HOST_ENV) or LOOPBACK


# Listen addresses that mean "every address of this host", and where this host reaches them.
EVERY_ADDRESS = {"0.0.0.0": LOOPBACK, "::": "::1"}


def reach_host() -> str:
    """The address this machine reaches the web server at (loopback when it listens on
    every address)."""
    host = listen_host()
    return EVERY_ADDRESS.get(host, host)


def url_host(host: str) -> str:
    """`host` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


class NotAnAddressHere(Exception):
    """The listen address is not one of this machine's (a typo, another host's address)."""


def port_free(port: int) -> bool:
    """Whether `port` (0: any) on the listen address can be listened on now; raises
    NotAnAddressHere when nothing can be listened on at that address."""
    host = listen_host()
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return False
        raise NotAnAddressHere(
            f"--host {host} is not an address of this machine ({error})"
        ) from error
    return True


def wait_port(
    port: int, timeout: float, proc: subprocess.Popen | None = None, host: str = LOOPBACK
) -> None:
    """Return once something listens on `host`:`port`; raise if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def http_ok(url: str, timeout: float = 3.0) -> bool:
    """Whether a web server answers at `url` (any HTTP status counts as an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
