"""The killed-rank race, made deterministic: rank 1 is killed (SIGKILL) while rank 0 waits
for it, and rank 0 aborts the moment rank 1's program is gone, before its launcher can
report rank 1. mpirun then names rank 0 (the abort reached it first); the true first
failure is rank 1's."""

import os
import signal
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
pids = comm.allgather(os.getpid())
comm.Barrier()
if comm.Get_rank() == 1:
    print("rank 1 is about to be killed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:  # no such file or process: gone
        return True


while not gone(pids[1]):
    time.sleep(0.001)
print("rank 0: my peer is gone; aborting", file=sys.stderr, flush=True)
comm.Abort(14)
