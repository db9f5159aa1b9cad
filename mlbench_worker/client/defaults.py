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
import re

from mlbench_worker.shared.home import mlbench_home

# The names `mlbench cluster` accepts (clusters/spec.py's NAME): a damaged or planted
# `active` file never leads outside MLBENCH_HOME/clusters/.
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")


def _active_cluster() -> dict:
    """The active cluster's record (MLBENCH_HOME/clusters/), or {} when none is active or
    its record cannot be read as one."""
    clusters = mlbench_home() / "clusters"
    try:
        name = (clusters / "active").read_text().strip()
        if not _NAME.match(name):
            return {}
        record = json.loads((clusters / name / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and isinstance(record.get("url"), str) else {}


def _same(url: str, other: str) -> bool:
    def norm(u: str) -> str:
        u = u.strip().rstrip("/")
        return u if "://" in u else "http://" + u

    return bool(url and other) and norm(url) == norm(other)


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


def default_token(url: str | None = None) -> str | None:
    """MLBENCH_TOKEN, else the token of the master at `url` (default: `default_url()`):
    the active cluster's admin token when `url` is that cluster's master, else the
    embedded master's. A cluster's token never goes to another address, whatever
    --url or MLBENCH_URL names; and no other token goes to the cluster's master."""
    token = os.environ.get("MLBENCH_TOKEN", "").strip()
    if token:
        return token
    url = url if url is not None else default_url()
    cluster = _active_cluster()
    if cluster and _same(url or "", cluster["url"]):
        return str(cluster.get("token") or "") or None
    return _embedded("token")
