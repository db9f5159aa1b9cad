"""Which master the client talks to when it is given no URL or token, in one place.

The order: MLBENCH_URL / MLBENCH_TOKEN; else the cluster `mlbench cluster use` made active
(its master's address and admin token, recorded when `mlbench cluster create` installed
it); else the embedded master this machine started (`mlbench up` writes MLBENCH_HOME/url
and MLBENCH_HOME/token). The cluster's record is read as plain JSON here, so that this
module, imported by every command, stays as cheap as it was.
"""

from __future__ import annotations

import json
import os

from mlbench_worker.shared.home import mlbench_home


def _active_cluster() -> dict:
    """The active cluster's record (MLBENCH_HOME/clusters/), or {} when none is active."""
    clusters = mlbench_home() / "clusters"
    try:
        name = (clusters / "active").read_text().strip()
        return json.loads((clusters / name / "cluster.json").read_text()) if name else {}
    except (OSError, ValueError):
        return {}


def _embedded(name: str) -> str | None:
    try:
        return (mlbench_home() / name).read_text().strip() or None
    except OSError:
        return None


def default_url() -> str | None:
    """MLBENCH_URL, else the active cluster's master, else the embedded master's URL."""
    url = os.environ.get("MLBENCH_URL", "").strip()
    if url:
        return url
    return _active_cluster().get("url") or _embedded("url")


def default_token() -> str | None:
    """MLBENCH_TOKEN, else the active cluster's admin token, else the embedded master's.
    With MLBENCH_URL set and no MLBENCH_TOKEN, the embedded master's token (the URL may
    be that master's own); a cluster's token never goes to another address."""
    token = os.environ.get("MLBENCH_TOKEN", "").strip()
    if token:
        return token
    if not os.environ.get("MLBENCH_URL", "").strip():
        cluster = _active_cluster()
        if cluster.get("url"):
            return cluster.get("token") or None
    return _embedded("token")
