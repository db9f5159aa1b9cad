"""What `mlbench cluster create` asks of a provider, and what a provider hands back.

Why one module: three providers (Google Cloud, AWS, kind) create clusters through their own
client libraries, but the command around them is one: it checks the request, records every
resource the moment it exists (so an interrupted create can be resumed or deleted), writes
a kubeconfig context of its own, installs the chart and prices the machines. The contract
between that command and a provider is declared here once; each provider module
(gcloud.py, aws.py, kind.py) implements `Provider`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

PROVIDERS = ("gcloud", "aws", "kind")
# A name every provider accepts: GKE's rule is the strictest (lower case, starts with a
# letter, at most 40 characters, no trailing hyphen).
NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")


class ClusterError(Exception):
    """Something the user can act on: what failed, and `fix`, what to do about it."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}: {self.fix}" if self.fix else text


@dataclass
class ClusterSpec:
    """A cluster as the user asked for it (the provider's defaults filled in by
    `Provider.complete`). Zero or empty means "the provider's default"."""

    provider: str
    name: str
    nodes: int = 2
    machine_type: str = ""
    gpus: int = 0  # per node
    gpu_type: str = ""
    region: str = ""  # AWS: the region; Google Cloud: the region of a regional cluster
    zone: str = ""  # Google Cloud: the zone of a zonal cluster (the default kind)
    project: str = ""  # Google Cloud only
    disk_gb: int = 0
    spot: bool = False  # spot (AWS) or Spot VMs (Google Cloud) instead of on-demand
    kubernetes_version: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterSpec:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def location(self) -> str:
        """Where it is, as people say it: the zone, else the region."""
        return self.zone or self.region


def check_name(name: str) -> None:
    """ClusterError unless `name` is one every provider accepts."""
    if not NAME.match(name or ""):
        raise ClusterError(
            f"cluster name {name!r} is not allowed",
            "use 1 to 40 lower-case letters, digits and hyphens, starting with a letter and "
            "not ending with a hyphen (e.g. bench-1)",
        )


@dataclass
class Resource:
    """One thing a create made and a delete must remove: `kind` is the provider's word
    (e.g. "iam-role", "vpc", "eks-cluster", "gke-cluster", "kind-cluster"), `id` what the
    provider's API names it by, `detail` anything else the delete needs (a region, an
    attached policy's ARN)."""

    kind: str
    id: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resource:
        return cls(str(data["kind"]), str(data["id"]), dict(data.get("detail") or {}))

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class Ledger:
    """The resources of one cluster, in the order they were made. `add` is called by a
    provider as soon as a resource exists (before waiting for it to be ready), and the
    ledger is saved at once (`on_change`): whatever interrupts a create, a later delete
    finds everything it made."""

    def __init__(
        self, resources: list[Resource] | None = None, on_change: Callable[[], None] | None = None
    ) -> None:
        self.resources = list(resources or [])
        self._on_change = on_change

    def add(self, resource: Resource) -> Resource:
        if not any(r.kind == resource.kind and r.id == resource.id for r in self.resources):
            self.resources.append(resource)
            self._changed()
        return resource

    def remove(self, resource: Resource) -> None:
        self.resources = [
            r for r in self.resources if not (r.kind == resource.kind and r.id == resource.id)
        ]
        self._changed()

    def find(self, kind: str) -> list[Resource]:
        return [r for r in self.resources if r.kind == kind]

    def first(self, kind: str) -> Resource | None:
        found = self.find(kind)
        return found[0] if found else None

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


@dataclass
class KubeAccess:
    """How to reach the new cluster's Kubernetes API: its address, its certificate
    authority (base64 PEM, as a kubeconfig holds it), and a client certificate and key
    where the provider gives fixed ones (kind). Where it does not (EKS, GKE: tokens that
    expire), the kubeconfig the command writes runs `mlbench cluster token NAME`, which
    prints the provider's `token`."""

    server: str
    ca_data: str
    client_cert_data: str = ""
    client_key_data: str = ""


@dataclass
class Removal:
    """What a delete removed, and what it could not (with why), in the order it tried."""

    removed: list[Resource] = field(default_factory=list)
    failed: list[tuple[Resource, str]] = field(default_factory=list)


class Say:
    """Progress for people: every line says how long the step has taken so far."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        self._write = write
        self._start = time.monotonic()

    def __call__(self, text: str) -> None:
        self._write(f"[{time.monotonic() - self._start:5.0f} s] {text}")


class Provider(Protocol):
    """One cloud (or kind). Every method raises ClusterError with a fix for what the user
    can act on: missing credentials or tool, a quota exceeded, an unknown machine type,
    region or zone, a name already taken."""

    name: str

    def complete(self, spec: ClusterSpec) -> ClusterSpec:
        """The spec with this provider's defaults filled in and its options checked
        (an option the provider has no use for, e.g. --project on AWS, is refused)."""
        ...

    def create(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> KubeAccess:
        """Make the cluster and its node pool(s), each resource recorded in `ledger` as
        soon as it exists, and wait until the nodes are ready. Resuming: what `ledger`
        already holds and still exists is reused, not made again."""
        ...

    def delete(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> Removal:
        """Remove everything in `ledger`, newest first (node pools before the cluster,
        the cluster before its roles and network), each removed one dropped from the
        ledger; one already gone counts as removed. A failure is reported, not raised,
        and the rest is still tried."""
        ...

    def token(self, spec: ClusterSpec) -> dict[str, Any]:
        """A Kubernetes ExecCredential (apiVersion client.authentication.k8s.io/v1) for
        the cluster: {"kind": "ExecCredential", "apiVersion": ..., "status": {"token":
        ..., "expirationTimestamp": ...}}. kind has none (it uses a client certificate)."""
        ...
