"""Resource readings of local ranks (CPU cores in use, resident memory, network bytes).

Read with psutil from the rank processes themselves, found by their markers, so a reading
always belongs to the run and rank whose process it is.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import psutil

from mlbench_master.cluster.base import PodSample
from mlbench_master.cluster.local.processes import rank_processes

POD_PREFIX = "local-worker-"

# (pid, create_time) -> (wall time, cpu seconds) at the previous reading, for CPU rates.
_CPU_SEEN: dict[tuple[int, float], tuple[float, float]] = {}


def rank_samples(home: Path) -> list[PodSample]:
    """One reading of every live local rank under `home` (slot i runs rank i)."""
    now = dt.datetime.now(dt.UTC)
    wall = time.time()
    samples: list[PodSample] = []
    seen: set[tuple[int, float]] = set()
    for (run_id, rank), procs in sorted(rank_processes(home).items()):
        cpu = 0.0
        memory = 0
        net: tuple[int, int] | None = None
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
                used = times.user + times.system
                memory += proc.memory_info().rss
            except psutil.Error:
                continue
            seen.add(key)
            previous = _CPU_SEEN.get(key)
            if previous is None:
                span = max(wall - key[1], 1e-3)
                cpu += used / span
            else:
                span = max(wall - previous[0], 1e-3)
                cpu += max(0.0, used - previous[1]) / span
            _CPU_SEEN[key] = (wall, used)
            if net is None:
                net = _net_bytes(proc.pid)
        pod = f"{POD_PREFIX}{rank}"
        meta: dict[str, Any] = {"rank": rank}
        if run_id.isdigit():
            meta["run_id"] = int(run_id)
        samples.append(PodSample(pod, "cpu_cores", round(cpu, 4), now, False, dict(meta)))
        samples.append(PodSample(pod, "memory_bytes", float(memory), now, False, dict(meta)))
        if net is not None:
            # Ranks on one machine share its network namespace: these are host counters.
            net_meta = dict(meta, scope="host")
            samples.append(PodSample(pod, "net_rx_bytes", float(net[0]), now, True, net_meta))
            samples.append(PodSample(pod, "net_tx_bytes", float(net[1]), now, True, dict(net_meta)))
    for key in list(_CPU_SEEN):
        if key not in seen:
            del _CPU_SEEN[key]
    return samples


def _net_bytes(pid: int) -> tuple[int, int] | None:
    """Received and sent bytes of the network namespace `pid` lives in (all interfaces)."""
    try:
        text = Path(f"/proc/{pid}/net/dev").read_text()
    except OSError:
        return None
    rx = tx = 0
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        fields = line.split(":", 1)[1].split()
        if len(fields) >= 9:
            rx += int(fields[0])
            tx += int(fields[8])
    return rx, tx
