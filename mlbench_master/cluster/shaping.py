"""How a worker's link is shaped, for both drivers: the `tc` commands, in one place.

An HTB root qdisc on the worker's interface: class 1:20 (the default) carries the run's
rate, class 1:10 is unlimited and takes the packets to the `spared` addresses (the master,
and on the local cluster the slots' gateway), chosen by a u32 filter each. A latency is a
netem qdisc under 1:20, so it delays exactly the traffic the rate limits. The Kubernetes
driver runs these lines in each worker pod's shell (`dev` is "$dev" there); the local
cluster runs them in each slot's namespace on its eth0.
"""

from __future__ import annotations

import shlex

UNLIMITED = "100gbit"


def tc_lines(dev: str, mbit: int | None, latency_ms: float | None, spared: list[str]) -> list[str]:
    """The `tc` command lines that shape `dev` (a rate of None: only the latency)."""
    rate = f"{int(mbit)}mbit" if mbit else UNLIMITED
    lines = [
        f"tc qdisc add dev {dev} root handle 1: htb default 20",
        f"tc class add dev {dev} parent 1: classid 1:10 htb rate {UNLIMITED}",
        f"tc class add dev {dev} parent 1: classid 1:20 htb rate {rate} ceil {rate}",
    ]
    if latency_ms:
        lines.append(
            f"tc qdisc add dev {dev} parent 1:20 handle 20: netem delay {float(latency_ms):g}ms "
            "limit 100000"
        )
    lines += [
        f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 "
        f"match ip dst {shlex.quote(ip)}/32 flowid 1:10"
        for ip in spared
    ]
    return lines
