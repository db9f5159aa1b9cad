"""Processes and ports of this machine, as the embedded master needs them.

Why a module of its own: the supervisor (stopping its children, waiting for Redis and the
web server) and the `down`/`status` commands (a master started from another shell) ask the
same questions: is this pid alive, stop this process group, is this port free, does
something answer there. Standard library only; no Django.
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
    """SIGTERM the process group of `pid` (services run in their own), SIGKILL if it lingers.

    An RQ worker gets SIGTERM twice: the first asks for a warm stop, the second stops the
    job it is executing.
    """

    def signal_group(sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    signal_group(signal.SIGTERM)
    time.sleep(0.2)
    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.1)
    signal_group(signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


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
