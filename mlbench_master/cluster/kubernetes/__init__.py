"""The Kubernetes cluster driver (MLBENCH_CLUSTER=kubernetes).

The workers are the pods of the helm chart's worker StatefulSet; the master scales it per
run, execs mpirun in pod 0 and reads the output and exit code over the exec websocket.

- names.py: the names and labels the chart gives the workers (one rule, shared with tests)
- shell.py: the commands run inside the worker pods (bandwidth limit, stop, liveness)
- podexec.py: the seam around `kubernetes.stream` (exec channels) and the Execution on it
- images.py: a run's custom worker image, and the record that brings the chart's back
- readiness.py: when a run's pods count as ready, and the reason when they do not
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
