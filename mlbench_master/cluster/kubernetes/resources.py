"""Reading and writing the worker pods' resources: quantities, limits, readiness, labels.

Pure functions over the official client's objects (or their JSON), so the driver's
decisions (re-patch or not, is this pod the one we asked for) are testable without a
cluster.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes.utils import parse_quantity

from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_master.cluster.kubernetes.names import WORKER_CONTAINER

GPU = "nvidia.com/gpu"


def cpu_quantity(cores: float) -> str:
    """Kubernetes notation for `cores` CPUs: "2" or "1500m"."""
    millis = round(float(cores) * 1000)
    if millis <= 0:
        raise ClusterError(f"num_cpus must be positive, got {cores}")
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def same_quantity(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return str(a) == str(b)


def labels_match(labels: dict[str, str] | None, selector: str) -> bool:
    wanted = dict(item.split("=", 1) for item in selector.split(","))
    return wanted.items() <= (labels or {}).items()


def ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def is_ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def event_time(event: Any) -> dt.datetime:
    stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return stamp or dt.datetime.min.replace(tzinfo=dt.UTC)


def desired_resources(run: RunSpec, current: dict[str, Any], max_gpus: int) -> dict[str, Any]:
    """The worker container's resources for `run`, changing only what must change."""
    cpu = cpu_quantity(run.num_cpus)
    limits = dict(current.get("limits") or {})
    requests = dict(current.get("requests") or {})
    for values in (limits, requests):
        if not same_quantity(values.get("cpu"), cpu):  # "1000m" stays: the same as "1"
            values["cpu"] = cpu
    if run.gpu_enabled:
        # The chart's limits.gpu when it set one, else MLBENCH_MAX_GPUS, else one.
        limits[GPU] = str(limits.get(GPU) or max_gpus or 1)
    else:
        limits.pop(GPU, None)
        requests.pop(GPU, None)
    resources = dict(current)
    resources["limits"] = limits
    resources["requests"] = requests
    return resources


def has_limits(pod: Any, limits: dict[str, Any]) -> bool:
    """Whether `pod`'s worker container runs with `limits` (not the previous ones)."""
    container = next((c for c in pod.spec.containers if c.name == WORKER_CONTAINER), None)
    have = (container.resources.limits or {}) if container and container.resources else {}
    return all(same_quantity(have.get(k), v) for k, v in limits.items()) and (
        GPU in limits or GPU not in have
    )
