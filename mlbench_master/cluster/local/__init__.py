"""The local cluster driver (MLBENCH_CLUSTER=local): worker ranks as processes on this machine.

- processes.py: finding a launch's processes by their environment markers, killing them all
- execution.py: a launch as the job sees it (output files, exit code file, offsets)
- usage.py: CPU, memory and network readings of the ranks
- driver.py: LocalCluster itself
"""

from mlbench_master.cluster.local.driver import LocalCluster, local_slots
from mlbench_master.cluster.local.execution import LocalExecution
from mlbench_master.cluster.local.processes import launch_processes, rank_processes

__all__ = [
    "LocalCluster",
    "LocalExecution",
    "launch_processes",
    "local_slots",
    "rank_processes",
]
