"""The run's bandwidth limit in the worker pods, applied with `tc` (shell.py builds the
commands) and removed when the run ends.

Traffic to the master (its service and pod addresses) is spared, so a run limited to a
few Mbit/s still reports its metrics on time.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.kubernetes import shell

log = logging.getLogger(__name__)

RunInPod = Callable[[str, list[str]], tuple[int, str]]


def master_addresses(master_url: str, pod_ip: str | None) -> list[str]:
    """IPv4 addresses of the master (service and pod) that the bandwidth limit spares."""
    addresses = []
    host = urlsplit(master_url).hostname
    if host:
        try:
            addresses += sorted({a[4][0] for a in socket.getaddrinfo(host, None, socket.AF_INET)})
        except OSError as error:
            log.warning("cannot resolve the master host %s: %s", host, error)
    if pod_ip and pod_ip not in addresses:
        addresses.append(pod_ip)
    return addresses


def apply(
    run_in_pod: RunInPod,
    pods: list[str],
    mbit: int,
    spared: list[str],
    latency_ms: float | None = None,
) -> None:
    """Limit every pod's egress to `mbit` Mbit/s with `latency_ms` of delay (0: no limit,
    any old one removed)."""
    command = (
        shell.limit_bandwidth(mbit, spared, latency_ms) if mbit > 0 else shell.clear_bandwidth()
    )
    for pod in pods:
        code, output = run_in_pod(pod, command)
        if code != 0:
            clear(run_in_pod, pods)
            raise ClusterError(
                f"cannot apply the bandwidth limit of {mbit} mbit/s in pod {pod} "
                f"(tc exit code {code}): {output.strip()[-300:]}"
            )


def clear(run_in_pod: RunInPod, pods: list[str]) -> None:
    """Remove the limit from `pods` (best effort: a pod that is gone has none)."""
    for pod in pods:
        try:
            code, output = run_in_pod(pod, shell.clear_bandwidth())
            if code != 0:
                log.warning("bandwidth limit not removed in %s: %s", pod, output.strip())
        except ClusterError as error:
            log.warning("bandwidth limit not removed in %s: %s", pod, error)
