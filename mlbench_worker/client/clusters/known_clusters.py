"""The clusters this client made, kept under MLBENCH_HOME/clusters/, and which one is active.

Why files and not the master: a cluster exists before its master does (and after it is
gone), and what a delete must remove has to survive a create that was interrupted. Each
cluster has a folder MLBENCH_HOME/clusters/NAME/ holding `cluster.json` (the spec, the
state, the ledger of made resources, the master's address and token once installed) and
`kubeconfig` (a context of its own: the user's ~/.kube/config is never touched). The
file `active` names the cluster the other commands talk to (`mlbench cluster use`).

Every save writes a new file and renames it over the old one, so an interrupted save
leaves the previous record whole.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbench_worker.client.clusters.spec import (
    ClusterError,
    ClusterSpec,
    Ledger,
    Resource,
    check_name,
)
from mlbench_worker.shared.home import mlbench_home

CREATING = "creating"  # resources are being made (or a create was interrupted)
INSTALLING = "installing"  # the cluster exists; the chart is going in
READY = "ready"  # the master answers at `url`
DELETING = "deleting"  # a delete started and did not remove everything
FAILED = "failed"  # a create stopped on an error; `error` says which


def clusters_dir() -> Path:
    return mlbench_home() / "clusters"


@dataclass
class ClusterRecord:
    """One cluster as this client knows it."""

    spec: ClusterSpec
    state: str = CREATING
    created_at: str = ""
    resources: list[Resource] = field(default_factory=list)
    url: str = ""  # the dashboard and API, once the master answers
    token: str = ""  # the master's admin API token (the chart's secret)
    password: str = ""  # the dashboard's admin password (the chart's secret)
    error: str = ""
    prices: list[dict[str, Any]] = field(default_factory=list)  # lines sent to the master
    registry: str = ""  # where the images are (--registry), kept for a resumed install
    tag: str = ""  # the images' tag (--tag)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def folder(self) -> Path:
        return clusters_dir() / self.spec.name

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def context(self) -> str:
        """The kubeconfig context's name (and its cluster's and user's)."""
        return f"mlbench-{self.spec.name}"

    def ledger(self) -> Ledger:
        """The ledger of this record's resources, saved whenever a provider adds to it."""
        ledger = Ledger(self.resources)

        def changed() -> None:
            self.resources = ledger.resources
            save(self)

        ledger._on_change = changed
        return ledger

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_json(),
            "state": self.state,
            "created_at": self.created_at,
            "resources": [r.to_json() for r in self.resources],
            "url": self.url,
            "token": self.token,
            "password": self.password,
            "error": self.error,
            "prices": self.prices,
            "registry": self.registry,
            "tag": self.tag,
            "context": self.context,
            "kubeconfig": str(self.kubeconfig),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterRecord:
        return cls(
            spec=ClusterSpec.from_json(data["spec"]),
            state=str(data.get("state", CREATING)),
            created_at=str(data.get("created_at", "")),
            resources=[Resource.from_json(r) for r in data.get("resources", [])],
            url=str(data.get("url", "")),
            token=str(data.get("token", "")),
            password=str(data.get("password", "")),
            error=str(data.get("error", "")),
            prices=list(data.get("prices", [])),
            registry=str(data.get("registry", "")),
            tag=str(data.get("tag", "")),
        )


def new(spec: ClusterSpec) -> ClusterRecord:
    """A record for a cluster about to be made; ClusterError if this client already has
    one of that name (the fix names both ways out)."""
    if (clusters_dir() / spec.name / "cluster.json").exists():
        old = load(spec.name)
        raise ClusterError(
            f"this client already has a cluster named {spec.name!r} ({old.spec.provider}, "
            f"{old.state})",
            f"resume it with `mlbench cluster create {old.spec.provider} {spec.name}`, "
            f"or remove it with `mlbench cluster delete {spec.name}`"
            if old.state in (CREATING, FAILED, INSTALLING)
            else f"choose another name, or `mlbench cluster delete {spec.name}` first",
        )
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    record = ClusterRecord(spec=spec, created_at=now)
    save(record)
    return record


def save(record: ClusterRecord) -> None:
    check_name(record.name)
    record.folder.mkdir(parents=True, exist_ok=True)
    os.chmod(record.folder, 0o700)  # it holds the master's token and the kubeconfig
    target = record.folder / "cluster.json"
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
    os.chmod(partial, 0o600)
    partial.replace(target)


def load(name: str) -> ClusterRecord:
    """The record of `name`; ClusterError naming the known ones if there is none, and for
    a name no cluster may have (so `..` never leads out of MLBENCH_HOME/clusters/) or a
    record that cannot be read (or names another cluster than its folder)."""
    check_name(name)
    path = clusters_dir() / name / "cluster.json"
    try:
        record = _parse(json.loads(path.read_text()))
    except FileNotFoundError:
        known = ", ".join(r.name for r in all_records()) or "none yet"
        raise ClusterError(
            f"no cluster named {name!r} made by this client (MLBENCH_HOME={mlbench_home()})",
            f"the known ones: {known}; `mlbench cluster list` shows them",
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError, ClusterError) as exc:
        raise ClusterError(
            f"the record of cluster {name!r} at {path} cannot be read ({exc})",
            "restore it from a backup, or remove its folder; its resources carry the tag "
            f"mlbench-cluster={name} at the provider",
        ) from None
    if record.name != name:
        raise ClusterError(
            f"the record at {path} is of cluster {record.name!r}, not {name!r}",
            f"move it back to {clusters_dir() / record.name}, or remove the folder",
        )
    return record


def _parse(data: Any) -> ClusterRecord:
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        raise ValueError("not a cluster record")
    record = ClusterRecord.from_json(data)
    check_name(record.name)
    if record.spec.provider not in ("gcloud", "aws", "kind"):
        raise ValueError(f"unknown provider {record.spec.provider!r}")
    return record


def all_records() -> list[ClusterRecord]:
    """Every cluster this client made, oldest first."""
    found = []
    if clusters_dir().is_dir():
        for path in sorted(clusters_dir().glob("*/cluster.json")):
            try:
                record = _parse(json.loads(path.read_text()))
            except (ValueError, KeyError, TypeError, AttributeError, ClusterError):
                continue  # `load` names the damage when that cluster is asked for
            if record.name == path.parent.name:
                found.append(record)
    return sorted(found, key=lambda r: (r.created_at, r.name))


def forget(record: ClusterRecord) -> None:
    """Remove the record and its kubeconfig (once everything it made is gone): only the
    folder MLBENCH_HOME/clusters/NAME of a name `check_name` accepts."""
    check_name(record.name)
    if active_name() == record.name:
        (clusters_dir() / "active").unlink(missing_ok=True)
    shutil.rmtree(clusters_dir() / record.name, ignore_errors=True)


def active_name() -> str | None:
    try:
        name = (clusters_dir() / "active").read_text().strip()
    except OSError:
        return None
    try:
        check_name(name)
    except ClusterError:
        return None
    return name


def active() -> ClusterRecord | None:
    """The active cluster's record, if one is set and still known."""
    name = active_name()
    if not name:
        return None
    try:
        return load(name)
    except ClusterError:
        return None


def use(name: str | None) -> None:
    """Make `name` the active cluster (None: none; the embedded master again)."""
    target = clusters_dir() / "active"
    if name is None:
        target.unlink(missing_ok=True)
        return
    load(name)  # ClusterError for an unknown one, or a name no cluster may have
    clusters_dir().mkdir(parents=True, exist_ok=True)
    target.write_text(name + "\n")
