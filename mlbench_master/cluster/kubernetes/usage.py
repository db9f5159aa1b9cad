"""Resource readings of the worker pods: CPU and memory from the metrics API
(metrics-server), network bytes from the pods' own interface counters.

The driver calls these with what they need (its API client, a way to run a command in a
pod, which pod runs which rank of the active run); they hold no state of their own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from mlbench_master.cluster.base import ClusterError, PodSample
from mlbench_master.cluster.kubernetes import shell
from mlbench_master.cluster.kubernetes.resources import labels_match

METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"

RunInPod = Callable[..., tuple[int, str]]


class MetricsUnavailable(Exception):
    """The cluster serves no metrics API (no metrics-server)."""


def metrics_items(api_client: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The metrics API's PodMetrics of the worker pods; MetricsUnavailable when not served."""
    try:
        answer = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            METRICS_GROUP, METRICS_VERSION, namespace, "pods", label_selector=selector
        )
    except ApiException as error:
        if error.status in (404, 503):
            raise MetricsUnavailable(f"{METRICS_GROUP}/{METRICS_VERSION}") from error
        raise
    # The selector is applied here too: the answer must not depend on the server's care.
    return [
        item
        for item in answer.get("items", [])
        if labels_match(item.get("metadata", {}).get("labels"), selector)
    ]


def pod_samples(
    items: list[dict[str, Any]],
    ranks: dict[str, dict[str, int]],
    run_in_pod: RunInPod,
) -> list[PodSample]:
    """Readings from PodMetrics `items`; `ranks` maps a pod to its {"run_id", "rank"}."""
    samples = []
    for item in items:
        meta = item.get("metadata", {})
        date = _parse_time(item.get("timestamp"))
        usage = [c.get("usage", {}) for c in item.get("containers", [])]
        cpu = sum(float(parse_quantity(u.get("cpu", "0"))) for u in usage)
        memory = sum(float(parse_quantity(u.get("memory", "0"))) for u in usage)
        name = meta.get("name", "")
        extra = ranks.get(name, {})
        samples.append(PodSample(name, "cpu_cores", cpu, date, False, dict(extra)))
        samples.append(PodSample(name, "memory_bytes", memory, date, False, dict(extra)))
        samples += network_samples(run_in_pod, name, date, extra)
    return samples


def network_samples(
    run_in_pod: RunInPod, pod: str, date: dt.datetime, metadata: dict[str, int]
) -> list[PodSample]:
    """Cumulative bytes through the pod's interfaces (the metrics API has no network)."""
    try:
        code, output = run_in_pod(pod, shell.network_counters(), timeout=10)
        rx, tx = (float(v) for v in output.split()[:2])
    except (ClusterError, ValueError):
        return []
    if code != 0:
        return []
    return [
        PodSample(pod, "net_rx_bytes", rx, date, True, dict(metadata)),
        PodSample(pod, "net_tx_bytes", tx, date, True, dict(metadata)),
    ]


def _parse_time(value: str | None) -> dt.datetime:
    if value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)
