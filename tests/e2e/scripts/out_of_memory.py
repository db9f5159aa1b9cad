"""Rank 1 waits until the test has moved it into a small memory cgroup (one named
mlbench-oom-*), then allocates far more than it allows, so the kernel's OOM killer ends it.
Rank 0 waits. (The test moves it: inside a worker slot's network namespace /sys is
remounted, so the rank cannot reach the cgroup files itself.)"""

import os
import time

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if rank == 1:
    print("rank 1 waiting for its cgroup", flush=True)
    while "mlbench-oom-" not in open("/proc/self/cgroup").read():
        time.sleep(0.05)
    print("rank 1 allocating", flush=True)
    hoard = []
    while True:
        hoard.append(bytearray(16 * 1024 * 1024))  # touched: bytearray zero-fills
time.sleep(60)
