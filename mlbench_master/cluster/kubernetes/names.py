"""Names the helm chart gives the worker objects; the chart tests check both sides agree."""

from __future__ import annotations

# The container of the worker pods that runs sshd and the ranks (and gets the run's limits).
WORKER_CONTAINER = "worker"
# Where the data sets live inside the worker pods (the persistent disk's mount point).
DATA_DIR = "/datasets"
# An emptyDir of every worker pod (volume "state"): the files of each launch (mpirun's output,
# its exit code, the read offsets), so a restarted master re-attaches, and the runs'
# checkpoints when no writable disk holds the data sets. Outlives the container, not the pod.
STATE_DIR = "/var/lib/mlbench"
STATE_VOLUME = "state"
# Marker in the environment of every process of a launch in pod 0: found, and stopped, by it.
LAUNCH_MARK = "MLBENCH_K8S_LAUNCH_ID"
# Annotations on the worker StatefulSet while a run's custom image replaces the chart's:
# the image to put back, and the custom image the driver set. They live on the cluster, not
# in the master, so any master process (a later run, a restarted master) can put it back.
ORIGINAL_IMAGE_ANNOTATION = "mlbench.github.io/original-worker-image"
CUSTOM_IMAGE_ANNOTATION = "mlbench.github.io/custom-worker-image"


def worker_statefulset_name(release: str) -> str:
    """The worker StatefulSet (and its headless Service) of a helm release."""
    return f"{release}-mlbench-worker"[:63].rstrip("-")


def worker_selector(release: str) -> str:
    """The label selector of a release's worker pods (the seed's app/component/release)."""
    return f"app=mlbench,component=worker,release={release}"


def host_name(pod: str, service: str, namespace: str) -> str:
    """A worker's DNS name through the headless Service, as mpirun's --host wants it.

    Ends in ".svc" so it resolves whatever the cluster domain is (the pods' resolv.conf
    search list completes it).
    """
    return f"{pod}.{service}.{namespace}.svc"
