"""Every rank says it started, then sleeps SECONDS (argument) and exits 0."""

import os
import sys
import time

rank = os.environ.get("OMPI_COMM_WORLD_RANK", "?")
print(f"rank {rank} started pid {os.getpid()}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 30)
print(f"rank {rank} done", flush=True)
