"""Shell commands the master execs inside the worker pods.

They run with /bin/sh of the worker image (Debian: dash, iproute2, procps). Built here, in
one place, so tests can read exactly what a pod is asked to do.
"""

from __future__ import annotations

from mlbench_master.cluster import shaping

# The interface that carries the pod's traffic (eth0 on every CNI we know; asked, not assumed).
_DEVICE = "dev=$(ip -o route show default | awk '{print $5; exit}'); dev=${dev:-eth0}"

# Everything a run starts: mpirun (and Open MPI 5's prterun), the per-host daemons, the ranks.
# "[m]lbench_worker" matches the ranks' command lines but not this shell's own.
_ALIVE = 'alive() { pgrep -x mpirun || pgrep -x prterun || pgrep -x prted || pgrep -f "[m]lbench_worker"; }'
_SIGNAL = (
    'signal() { for name in mpirun prterun prted; do pkill "-$1" -x "$name"; done; '
    'pkill "-$1" -f "[m]lbench_worker"; }'
)
_WAIT_GONE = "i=0; while alive >/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done"


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def limit_bandwidth(
    mbit: int, unlimited_ips: list[str], latency_ms: float | None = None
) -> list[str]:
    """Shape this pod's egress to `mbit` mbit/s, except traffic to `unlimited_ips` (the master).

    The rule is cluster/shaping.py's, which the local cluster's slots use too.
    """
    if mbit <= 0:
        raise ValueError("bandwidth must be positive")
    lines = [
        "set -e",
        _DEVICE,
        'tc qdisc del dev "$dev" root 2>/dev/null || true',
        *shaping.tc_lines('"$dev"', mbit, latency_ms, unlimited_ips),
    ]
    return sh("\n".join(lines))


def clear_bandwidth() -> list[str]:
    """Remove any limit set by limit_bandwidth (succeeds when there is none)."""
    return sh(f'{_DEVICE}\ntc qdisc del dev "$dev" root 2>/dev/null || true')


def stop_run() -> list[str]:
    """TERM every process of a run, KILL what is left after 5 s; exit 0 once all are gone."""
    return sh(
        "\n".join(
            [
                _ALIVE,
                _SIGNAL,
                "signal TERM",
                _WAIT_GONE,
                "signal KILL",
                _WAIT_GONE,
                "if alive >/dev/null; then exit 1; fi",
            ]
        )
    )


def remove_tree(path: str) -> list[str]:
    """Remove `path` and everything under it (succeeds when it does not exist)."""
    return ["sh", "-c", 'rm -rf -- "$1"', "mlbench-remove", path]


def run_alive() -> list[str]:
    """Exit 0 when a process of a run is alive in this pod, 1 otherwise."""
    return sh(f"{_ALIVE}\nalive >/dev/null")


def environment_block(env: dict[str, str]) -> str:
    """Environment variables as the launch reads them from stdin ("NAME=value" lines, then
    an empty one; detach.launch). Secrets (the run's token) travel over the exec stream's
    stdin rather than in the exec URL, which API servers may log."""
    for name, value in env.items():
        if "\n" in value or "\n" in name or "=" in name or not name:
            raise ValueError(f"environment variable {name!r} cannot be passed to a pod")
    return "".join(f"{name}={value}\n" for name, value in env.items()) + "\n"


def network_counters() -> list[str]:
    """Print "rx_bytes tx_bytes" summed over the pod's interfaces except loopback.

    printf, not print: awk's print turns sums above 2**31 into "2.35862e+09", losing bytes.
    """
    return sh(
        'awk \'NR>2 { sub(/^ */, ""); split($0, a, /[: ]+/); '
        'if (a[1] != "lo") { rx += a[2]; tx += a[10] } } END { printf "%.0f %.0f\\n", rx, tx }\' /proc/net/dev'
    )
