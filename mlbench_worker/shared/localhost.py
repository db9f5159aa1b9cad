"""Networking helpers for processes on this machine: one `free_port()` for the whole repository.

Why a module of its own: the worker (torch.distributed's rendezvous port), the embedded
master (its Redis and web server ports) and the tests all need "a TCP port nothing listens
on now", and they should ask for it one way. This module imports only the standard library
(no torch, no Django), so mlbench_master may import it (as all of mlbench_worker.shared, the
only part of the worker it may: tests/test_worker_rooms.py).
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that nothing listens on now at `host` (the OS picks it).

    `host=""` checks every interface of this machine (for a server other hosts connect to).
    The port is free when this returns; whoever binds it next gets it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
