"""What of a run's launch record a bundle carries (run.json's `nodes`), read back.

Why: a run's cost is the prices of the nodes its launch recorded (results/cost.py). The
rest of the launch record (pids, pods, job ids) is its master's bookkeeping and stays home,
but the nodes travel, so an imported run costs there what it cost at its origin. Each node
is read back in the shape cluster/node_kinds.py gives it, nothing more.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.bundles.refusals import BundleRefused
from mlbench_master.cluster.node_kinds import RECORD_KEY

MAX_NODES = 100_000  # a launch's nodes: one per worker at most


def carried(record: dict[str, Any], member: str) -> dict[str, Any]:
    """What of the origin's launch record run.json carries: its nodes, which its cost needs
    (results/cost.py). A bundle made before it carried them has no `nodes` key: nothing is
    recorded then, and the cost says why it is unknown; null is a launch that recorded none."""
    if "nodes" not in record:
        return {}
    nodes = record["nodes"] if record["nodes"] is not None else []
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        raise BundleRefused(f"member {member!r}: nodes is not a list of at most {MAX_NODES}")
    kept = []
    for node in nodes:
        name = node.get("name") if isinstance(node, dict) else None
        kinds = node.get("kinds") if isinstance(node, dict) else None
        workers = node.get("workers") if isinstance(node, dict) else None
        capacity = node.get("capacity", "") if isinstance(node, dict) else None
        if (
            not isinstance(name, str)
            or not isinstance(kinds, list)
            or not all(isinstance(k, str) for k in kinds)
            or isinstance(workers, bool)
            or not isinstance(workers, int)
            or workers < 0
            or not isinstance(capacity, str)
        ):
            raise BundleRefused(
                f"member {member!r}: a node is not {{name, kinds, workers, capacity}}: "
                f"{node!r:.120}"
            )
        kept.append({"name": name, "kinds": kinds, "workers": workers, "capacity": capacity})
    return {RECORD_KEY: kept}
