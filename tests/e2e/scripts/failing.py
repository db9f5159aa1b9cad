"""Rank 1 reports an error on stderr and exits with code 3; rank 0 keeps waiting."""

import os
import sys
import time

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
print(f"rank {rank} loading data", flush=True)
if rank == 1:
    time.sleep(0.5)
    print("Traceback (most recent call last):", file=sys.stderr, flush=True)
    print("ValueError: the data set is broken", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(30)
