"""What a launch records about the nodes its workers ran on, so a run can be priced.

Why here: the price table (results/prices.py) prices a node by its kind, and only the
driver knows what its nodes are. Each driver adds the same entry to its launch record
(`RECORD_KEY`), which the job stores with the run; the cost is then a function of the
stored run alone, on any master, long after the cluster changed.

A node is one machine the run paid for, counted once however many of the run's workers
it held: {"name", "kinds", "workers", "capacity"}. `kinds` are the names a price may be
given under, most specific first (docs/results.rst, "Which price a node gets"):

- local: this machine's host name, then ``local``;
- Slurm: the partition the job went to, then ``slurm`` (one worker per node, the nodes'
  names are Slurm's to choose and are not known when the job is submitted);
- Kubernetes: the node's name, then its machine type where the worker StatefulSet selects
  one (``node.kubernetes.io/instance-type`` in the chart's ``worker.nodeSelector``: the
  master may not read nodes, and a selected machine type is the node's by construction),
  then ``kubernetes``.

`capacity` is "preemptible" where the nodes are known to be (a spot or preemptible
selector), else "" (not known: the on-demand price applies where a kind has both).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping

RECORD_KEY = "nodes"
PREEMPTIBLE = "preemptible"
# Node labels that name a machine type, the current one first.
MACHINE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# Node labels (and the value) that select spot or preemptible machines.
PREEMPTIBLE_LABELS = {
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "kubernetes.azure.com/scalesetpriority": "spot",
}


def node(name: str, kinds: Iterable[str], workers: int, capacity: str = "") -> dict:
    """One node's entry; empty kinds are dropped (an unset partition, an unknown name)."""
    seen = [k for k in dict.fromkeys(kinds) if k]
    return {"name": name, "kinds": seen, "workers": int(workers), "capacity": capacity}


def local_nodes(num_workers: int) -> list[dict]:
    """Every slot of the local cluster is on this machine: one node."""
    host = socket.gethostname()
    return [node(host, [host, "local"], num_workers)]


def slurm_nodes(num_workers: int, partition: str) -> list[dict]:
    """A job of `num_workers` nodes with one task each (cluster/slurm/batch.py)."""
    return [node("", [partition, "slurm"], 1) for _ in range(num_workers)]


def kubernetes_nodes(
    pod_nodes: Iterable[str], node_selector: Mapping[str, str] | None
) -> list[dict]:
    """The distinct nodes of the ranks' pods (`pod_nodes`: each pod's node name, "" where
    not scheduled yet), with the machine type and capacity the StatefulSet selects."""
    selector = dict(node_selector or {})
    machine = next((selector[k] for k in MACHINE_TYPE_LABELS if selector.get(k)), "")
    capacity = (
        PREEMPTIBLE
        if any(str(selector.get(k, "")) == v for k, v in PREEMPTIBLE_LABELS.items())
        else ""
    )
    counts: dict[str, int] = {}
    unnamed = 0
    for name in pod_nodes:
        if name:
            counts[name] = counts.get(name, 0) + 1
        else:
            unnamed += 1
    out = [node(n, [n, machine, "kubernetes"], k, capacity) for n, k in counts.items()]
    out += [node("", [machine, "kubernetes"], 1, capacity) for _ in range(unnamed)]
    return out
