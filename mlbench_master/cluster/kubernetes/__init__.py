"""The Kubernetes cluster driver (MLBENCH_CLUSTER=kubernetes).

The workers are the pods of the helm chart's worker StatefulSet; the master scales it per
run and starts mpirun detached in pod 0, reading its output and exit code from files
there, so a restarted master re-attaches to a run in progress.

- names.py: the names and labels the chart gives the workers (one rule, shared with tests)
- shell.py: the commands run inside the worker pods (bandwidth limit, stop, liveness)
- detach.py: the pod side of a launch (detached start, output stream, offsets, stop)
- podexec.py: the seam around `kubernetes.stream` (exec channels, text or bytes)
- execution.py: a launch as the job sees it, read from pod 0's files from saved offsets
- pods.py: the API client, the StatefulSet, the pods, commands in them (the driver's base)
- images.py: a run's custom worker image, and the record that brings the chart's back
- readiness.py: when a run's pods count as ready, and the reason when they do not
- checkpoints.py: where a run's training checkpoints go in the pods
- driver.py: KubernetesCluster itself
"""

from mlbench_master.cluster.kubernetes.driver import KubernetesCluster
from mlbench_master.cluster.kubernetes.names import (
    DATA_DIR,
    WORKER_CONTAINER,
    host_name,
    worker_selector,
    worker_statefulset_name,
)

__all__ = [
    "DATA_DIR",
    "WORKER_CONTAINER",
    "KubernetesCluster",
    "host_name",
    "worker_selector",
    "worker_statefulset_name",
]
