"""Where a run's training checkpoints go in the worker pods.

Rank 0 (in pod 0) writes them. A checkpoint is worth most where it outlives the pod:
on the data-sets disk, when the chart mounts a persistent one writable at /datasets
(`gcePersistentDisk.enabled` without `readOnly`). Otherwise they go to the pods' "state"
emptyDir (STATE_DIR), which outlives the ranks, mpirun and a restart of the container,
but not the pod: a run whose pod 0 is replaced starts over. The data sets' emptyDir of a
chart without a disk is not used for them, as it would not outlive the pod either.

Decided from the StatefulSet's template as the cluster has it (a `helm upgrade` that
adds a disk takes effect for the next run), by a pure function testable without a cluster.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.cluster.kubernetes.names import DATA_DIR, STATE_DIR, WORKER_CONTAINER


def persistent_data_disk(statefulset: dict[str, Any]) -> bool:
    """Whether the worker container mounts a writable volume that outlives pods at DATA_DIR."""
    spec = ((statefulset.get("spec") or {}).get("template") or {}).get("spec") or {}
    worker = next(
        (c for c in spec.get("containers") or [] if c.get("name") == WORKER_CONTAINER), None
    )
    if worker is None:
        return False
    mount = next(
        (m for m in worker.get("volumeMounts") or [] if m.get("mountPath") == DATA_DIR), None
    )
    if mount is None or mount.get("readOnly"):
        return False
    volume = next((v for v in spec.get("volumes") or [] if v.get("name") == mount.get("name")), {})
    claim = volume.get("persistentVolumeClaim")
    return claim is not None and not claim.get("readOnly")


def directory(statefulset: dict[str, Any], run_id: int, state_dir: str = STATE_DIR) -> str:
    """The checkpoint directory of run `run_id`, as the ranks see it."""
    base = (
        f"{DATA_DIR}/checkpoints"
        if persistent_data_disk(statefulset)
        else f"{state_dir}/checkpoints"
    )
    return f"{base}/run-{int(run_id)}"
