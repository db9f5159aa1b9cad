"""A pod network for containers of the private engine, made without touching the host's
network: the engine runs with no bridge and no iptables, so the containers start with
`--network none` and are wired here, inside their own namespaces only.

- The "control" namespace (a holder container's) stands for the master pod and the
  cluster's services: the master's containers join it, and the test process enters it
  (setns, this thread only) to run PostgreSQL, Redis and the API front on its 127.0.0.1.
  It holds a bridge with the address the workers reach the master at.
- Each worker container has its own namespace (its own IP, hostname and sshd on port 22,
  like a pod), joined to the bridge by a veth pair created between the two namespaces.
Nothing is created in the host's namespace; removing the containers removes it all.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.images.engine import docker

CLONE_NEWNET = 0x40000000
SUBNET = "10.244.77"
MASTER_ADDRESS = f"{SUBNET}.1"


def pid_of(container: str) -> int:
    return int(docker("inspect", "-f", "{{.State.Pid}}", container).stdout.strip())


def in_netns(pid: int, *command: str) -> None:
    subprocess.run(["nsenter", "-t", str(pid), "-n", *command], check=True, capture_output=True)


def make_control(holder: str, image: str, hosts: dict[str, str]) -> int:
    """Start the holder (the master pod's network, with the chart's sysctl) and its bridge."""
    add_hosts = [f"--add-host={name}:{ip}" for name, ip in hosts.items()]
    docker(
        "run", "-d", "--name", holder, "--label", "mlbench-images-test=1",
        "--network", "none", *add_hosts,
        "--sysctl", "net.ipv4.ip_unprivileged_port_start=80",
        "--entrypoint", "sleep", image, "infinity",
    )  # fmt: skip
    pid = pid_of(holder)
    in_netns(pid, "ip", "link", "set", "lo", "up")
    in_netns(pid, "ip", "link", "add", "podbr", "type", "bridge")
    in_netns(pid, "ip", "addr", "add", f"{MASTER_ADDRESS}/24", "dev", "podbr")
    in_netns(pid, "ip", "link", "set", "podbr", "up")
    return pid


def wire(control_pid: int, container: str, address: str, index: int) -> None:
    """A veth pair from the bridge into `container`'s namespace, where it is eth0."""
    pid = pid_of(container)
    side = f"vw{index}"
    in_netns(control_pid, "ip", "link", "add", side, "type", "veth", "peer", "name", "eth0",
             "netns", str(pid))  # fmt: skip
    in_netns(control_pid, "ip", "link", "set", side, "master", "podbr", "up")
    in_netns(pid, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
    in_netns(pid, "ip", "link", "set", "eth0", "up")
    in_netns(pid, "ip", "link", "set", "lo", "up")


@contextmanager
def entered(pid: int) -> Iterator[None]:
    """This thread (and the threads and processes it starts meanwhile) in `pid`'s network
    namespace; back in its own afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the pod network")
        yield
    finally:
        libc.setns(own, CLONE_NEWNET)
        os.close(own)
        os.close(target)
