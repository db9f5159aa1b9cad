# Over 400 lines: one provider's whole life cycle (check, create, resume, delete, token)
# and the mapping of Google's errors to fixes, which those steps share.
"""Google Kubernetes Engine for `mlbench cluster create gcloud NAME`.

Why: a benchmark on Google Cloud should start from one command, not from a page of
console steps; and when it fails (no credentials, a quota, a machine type the zone lacks,
a name taken) the user should read what to do, not a stack trace.

What it makes: one GKE cluster with one node pool, "default-pool": `nodes` machines of
`machine_type` (e2-standard-4; n1-standard-4 with GPUs, since GPUs attach to N1
machines), each with `gpus` GPUs of `gpu_type` (nvidia-tesla-t4) and GKE's latest
driver, a `disk_gb` boot disk, Spot VMs with --spot. The cluster is zonal (us-central1-a)
unless a region is given; a regional cluster puts `nodes` nodes in each of the region's
zones (usually three), so it has three times the nodes and costs three times as much.
Both the cluster and its nodes carry the label mlbench-cluster=NAME. Kubernetes follows
the REGULAR release channel unless --kubernetes-version pins one.

Talking to Google: google-cloud-container's ClusterManagerClient over REST, with
Application Default Credentials (`gcloud auth application-default login`, or
GOOGLE_APPLICATION_CREDENTIALS naming a service account key). The environment variable
MLBENCH_GKE_API_ENDPOINT, when set, replaces Google's endpoint (container.googleapis.com)
with another: a private endpoint, or a test's local server (e.g. http://127.0.0.1:8080).
kubectl gets its tokens from `mlbench cluster token NAME` (`token` here), as it would from
gke-gcloud-auth-plugin, so that plugin need not be installed.

What was exercised only against a local fake of the GKE API (tests/clusters/fake_gke.py;
no Google account is reachable from where this was written): every request and answer
here, the error texts mapped below (taken from what GKE has answered users), the
operation polling and the token exchange. Not exercised: a real cluster's creation
times, GKE's answers to a delete of a cluster still being created, and whether a
regional cluster's operations live under the region (they are polled there).

The google libraries are imported inside functions: they are the optional "cloud" extra,
and `mlbench --help` must not wait for them.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from mlbench_worker.client.clusters.spec import (
    ClusterError,
    ClusterSpec,
    KubeAccess,
    Ledger,
    Removal,
    Resource,
    Say,
)

API_ENDPOINT_ENV = "MLBENCH_GKE_API_ENDPOINT"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
KIND = "gke-cluster"
POOL = "default-pool"
LABEL = "mlbench-cluster"
DEFAULT_ZONE = "us-central1-a"
POLL_SECONDS = 10.0  # between reads of a long-running operation (tests lower it)
SAY_EVERY_SECONDS = 60.0  # between "still waiting" lines (tests lower it)
CALL_TIMEOUT = 60.0  # one API request

ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
# A project ID: 6-30 lower-case letters, digits and hyphens, starting with a letter (old
# Workspace projects carry a "domain:" prefix).
PROJECT = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
NO_CREDENTIALS_FIX = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
    "to a service account key file"
)
INSTALL_FIX = "pip install 'mlbench[cloud]'"


class Gcloud:
    """The Google Cloud provider (see the module docstring)."""

    name = "gcloud"

    def complete(self, spec: ClusterSpec) -> ClusterSpec:
        """Defaults filled in and names checked here, before anything is billed: a typo in
        a zone should not cost a round trip to Google, let alone a half-made cluster."""
        if spec.zone and spec.region:
            raise ClusterError(
                "--zone and --region both given",
                "give --zone for a zonal cluster or --region for a regional one, not both",
            )
        if spec.region and not REGION.match(spec.region):
            raise ClusterError(
                f"{spec.region!r} is not a Google Cloud region",
                "give one like us-central1 (`gcloud compute regions list`); a zone such as "
                "us-central1-a goes to --zone",
            )
        zone = "" if spec.region else (spec.zone or DEFAULT_ZONE)
        if zone and not ZONE.match(zone):
            raise ClusterError(
                f"{zone!r} is not a Google Cloud zone",
                "give one like us-central1-a (`gcloud compute zones list`); a region such as "
                "us-central1 goes to --region",
            )
        if spec.project and not PROJECT.match(spec.project):
            raise ClusterError(
                f"{spec.project!r} is not a Google Cloud project ID",
                "give the project's ID (6-30 lower-case letters, digits and hyphens), not "
                "its display name: `gcloud projects list` shows both",
            )
        if spec.nodes < 1:
            raise ClusterError(
                f"--nodes {spec.nodes}: a cluster needs nodes", "give --nodes 1 or more"
            )
        if spec.gpus < 0:
            raise ClusterError(f"--gpus {spec.gpus} is negative", "give --gpus 0 or more")
        if spec.gpu_type and not spec.gpus:
            raise ClusterError(
                f"--gpu-type {spec.gpu_type} without --gpus",
                "add --gpus N (GPUs per node), or drop --gpu-type",
            )
        if spec.disk_gb and spec.disk_gb < 10:
            raise ClusterError(
                f"--disk-gb {spec.disk_gb}: GKE's boot disks are at least 10 GB",
                "give --disk-gb 10 or more (the default is 50)",
            )
        gpus = spec.gpus > 0
        return ClusterSpec.from_json(
            {
                **spec.to_json(),
                "zone": zone,
                "machine_type": spec.machine_type or ("n1-standard-4" if gpus else "e2-standard-4"),
                "gpu_type": spec.gpu_type or ("nvidia-tesla-t4" if gpus else ""),
                "disk_gb": spec.disk_gb or 50,
            }
        )

    def create(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> KubeAccess:
        """One create request, recorded in the ledger the moment Google accepts it, so an
        interrupted wait (Ctrl-C, a lost connection) resumes or deletes that cluster
        rather than making a second one."""
        credentials, project = _credentials(spec)
        client = _client(credentials)
        exceptions = _api_exceptions()
        known = next((r for r in ledger.find(KIND) if r.id == spec.name), None)
        detail = known.detail if known is not None else {}
        project = detail.get("project") or project
        where = _Where(project, detail.get("location") or spec.location, spec.name)

        cluster = None
        if known is not None:
            try:
                cluster = client.get_cluster(name=where.cluster, timeout=CALL_TIMEOUT)
                say(f"GKE cluster {spec.name} exists; not creating it again")
            except exceptions.NotFound:
                say(f"GKE cluster {spec.name} was recorded but is gone; creating it again")
            except exceptions.GoogleAPICallError as exc:
                raise _explain(exc, where, "get") from exc
        if cluster is None:
            if spec.region:
                say(
                    f"regional cluster: GKE puts {spec.nodes} node(s) in each of the zones of "
                    f"{spec.region} (usually 3, so {3 * spec.nodes} in all)"
                )
            say(f"asking GKE for cluster {spec.name} in {project}, {where.location}")
            try:
                operation = client.create_cluster(
                    request={"parent": where.parent, "cluster": _cluster_body(spec)},
                    timeout=CALL_TIMEOUT,
                )
            except exceptions.GoogleAPICallError as exc:
                raise _explain(exc, where, "create") from exc
            ledger.add(Resource(KIND, spec.name, {"project": project, "location": where.location}))
            _wait(client, where, operation.name, "create the cluster", "5-10", say)
        cluster = _wait_running(client, where, say)
        say(f"GKE cluster {spec.name} is running at {cluster.endpoint}")
        return KubeAccess(
            server="https://" + cluster.endpoint,
            ca_data=cluster.master_auth.cluster_ca_certificate,
        )

    def delete(self, spec: ClusterSpec, ledger: Ledger, say: Say) -> Removal:
        """Every GKE cluster the ledger holds, each waited for: the command must not report
        "deleted" while Google still bills for the nodes."""
        removal = Removal()
        ours = [r for r in reversed(ledger.resources) if r.kind == KIND]
        if not ours:
            return removal
        try:
            credentials, default_project = _credentials(spec, need_project=False)
            client = _client(credentials)
            exceptions = _api_exceptions()
        except ClusterError as exc:
            removal.failed.extend((r, str(exc)) for r in ours)
            return removal
        for resource in ours:
            project = resource.detail.get("project") or spec.project or default_project
            location = resource.detail.get("location") or spec.location
            where = _Where(str(project), str(location), resource.id)
            try:
                say(f"deleting GKE cluster {resource.id} in {project}, {location}")
                operation = client.delete_cluster(name=where.cluster, timeout=CALL_TIMEOUT)
                _wait(client, where, operation.name, "delete the cluster", "2-5", say)
            except exceptions.NotFound:
                say(f"GKE cluster {resource.id} was already gone")
            except exceptions.GoogleAPICallError as exc:
                removal.failed.append((resource, str(_explain(exc, where, "delete"))))
                continue
            except ClusterError as exc:
                removal.failed.append((resource, str(exc)))
                continue
            ledger.remove(resource)
            removal.removed.append(resource)
        return removal

    def token(self, spec: ClusterSpec) -> dict[str, Any]:
        """What gke-gcloud-auth-plugin prints, so kubectl needs only mlbench: an access
        token of the default credentials, with its expiry so kubectl caches it."""
        credentials, _ = _credentials(spec, need_project=False)
        try:
            from google.auth import exceptions as auth_exceptions
            from google.auth.transport.requests import Request
        except ImportError as exc:
            raise _missing(exc) from exc
        try:
            credentials.refresh(Request())
        except auth_exceptions.GoogleAuthError as exc:
            raise ClusterError(
                f"Google refused the credentials: {exc}", NO_CREDENTIALS_FIX
            ) from exc
        status: dict[str, Any] = {"token": credentials.token}
        if credentials.expiry is not None:  # naive UTC, as google-auth keeps it
            status["expirationTimestamp"] = credentials.expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "kind": "ExecCredential",
            "apiVersion": "client.authentication.k8s.io/v1",
            "spec": {},
            "status": status,
        }


class _Where:
    """The API's names for one cluster and its operations."""

    def __init__(self, project: str, location: str, name: str) -> None:
        self.project, self.location, self.name = project, location, name
        self.parent = f"projects/{project}/locations/{location}"
        self.cluster = f"{self.parent}/clusters/{name}"

    def operation(self, op: str) -> str:
        return f"{self.parent}/operations/{op}"


def _cluster_body(spec: ClusterSpec) -> dict[str, Any]:
    config: dict[str, Any] = {
        "machine_type": spec.machine_type,
        "disk_size_gb": spec.disk_gb,
        "spot": spec.spot,
        "labels": {LABEL: spec.name},
        "oauth_scopes": [SCOPE],
    }
    if spec.gpus > 0:
        config["accelerators"] = [
            {
                "accelerator_count": spec.gpus,
                "accelerator_type": spec.gpu_type,
                "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
            }
        ]
    cluster: dict[str, Any] = {
        "name": spec.name,
        "resource_labels": {LABEL: spec.name},
        "node_pools": [{"name": POOL, "initial_node_count": spec.nodes, "config": config}],
    }
    if spec.kubernetes_version:
        cluster["initial_cluster_version"] = spec.kubernetes_version
    else:
        cluster["release_channel"] = {"channel": "REGULAR"}
    return cluster


def _wait(client: Any, where: _Where, operation: str, what: str, usually: str, say: Say) -> None:
    """Poll a long-running operation until DONE; its error becomes a ClusterError."""
    exceptions = _api_exceptions()
    start = time.monotonic()
    last_said = float("-inf")
    while True:
        now = time.monotonic()
        if now - last_said >= SAY_EVERY_SECONDS:
            say(f"waiting for GKE to {what} (usually {usually} minutes): {_ago(now - start)}")
            last_said = now
        try:
            op = client.get_operation(name=where.operation(operation), timeout=CALL_TIMEOUT)
        except exceptions.GoogleAPICallError as exc:
            raise ClusterError(
                f"could not follow GKE's operation {operation}: {exc.message}",
                "run the command again to resume waiting",
            ) from exc
        if op.status.name == "DONE":
            break
        time.sleep(POLL_SECONDS)
    message = op.error.message or op.status_message
    if message:
        raise ClusterError(f"GKE could not {what}: {message}", _operation_fix(message, where))


def _wait_running(client: Any, where: _Where, say: Say) -> Any:
    """The cluster once RUNNING. A create resumed after an interruption comes here with
    no operation to follow (its name was not kept), so the cluster's own status is
    watched; after a finished operation the first look finds it RUNNING."""
    exceptions = _api_exceptions()
    start, last_said = time.monotonic(), float("-inf")
    while True:
        try:
            cluster = client.get_cluster(name=where.cluster, timeout=CALL_TIMEOUT)
        except exceptions.GoogleAPICallError as exc:
            raise _explain(exc, where, "get") from exc
        status = cluster.status.name
        if status in ("RUNNING", "DEGRADED"):  # DEGRADED still answers; GKE repairs it
            return cluster
        if status in ("ERROR", "STOPPING"):
            message = cluster.status_message or status
            raise ClusterError(
                f"GKE cluster {where.name} is {status}: {message}", _delete_fix(where.name)
            )
        now = time.monotonic()
        if now - last_said >= SAY_EVERY_SECONDS:
            say(f"waiting for GKE to create the cluster ({status}): {_ago(now - start)}")
            last_said = now
        time.sleep(POLL_SECONDS)


def _explain(exc: Any, where: _Where, action: str) -> ClusterError:
    """Google's answer as what failed and what to do: the errors users meet first."""
    exceptions = _api_exceptions()
    message = str(getattr(exc, "message", "") or exc)
    lower = message.lower()
    reasons = " ".join(str(getattr(exc, "reason", "") or "").split())
    quota = (
        isinstance(exc, exceptions.TooManyRequests)
        or "QUOTA_EXCEEDED" in reasons
        or (isinstance(exc, exceptions.Forbidden) and "quota" in lower)
    )
    if quota:
        return ClusterError(f"quota exceeded: {message}", _quota_fix(message, where.project))
    if isinstance(exc, exceptions.Conflict) and action == "create":
        return ClusterError(
            f"a GKE cluster named {where.name} already exists in project {where.project}, "
            f"{where.location}",
            f"choose another name (e.g. {where.name}-2); if that cluster is yours and unused, "
            f"`gcloud container clusters delete {where.name} --location {where.location} "
            f"--project {where.project}` removes it",
        )
    if isinstance(exc, exceptions.Forbidden):
        if "has not been used" in lower or "disabled" in lower or "SERVICE_DISABLED" in reasons:
            return ClusterError(
                f"the Kubernetes Engine API is not enabled in project {where.project}: {message}",
                f"`gcloud services enable container.googleapis.com --project {where.project}`",
            )
        return ClusterError(
            f"Google refused to {action} the cluster: {message}",
            f"the account needs permission container.clusters.{action} in project "
            f"{where.project} (role roles/container.admin: `gcloud projects "
            f"add-iam-policy-binding {where.project} --member user:YOU --role "
            f"roles/container.admin`), and the Kubernetes Engine API enabled: "
            f"`gcloud services enable container.googleapis.com --project {where.project}`",
        )
    if isinstance(exc, exceptions.Unauthorized):
        return ClusterError(f"Google refused the credentials: {message}", NO_CREDENTIALS_FIX)
    if isinstance(exc, exceptions.BadRequest | exceptions.NotFound):
        fix = _unknown_fix(lower, where.location)
        if fix:
            return ClusterError(f"GKE refused the cluster: {message}", fix)
        if isinstance(exc, exceptions.NotFound) and "project" in lower:
            return ClusterError(
                f"project {where.project} was not found: {message}",
                "pass --project with an existing project's ID (`gcloud projects list`)",
            )
    return ClusterError(
        f"GKE could not {action} cluster {where.name}: {message}",
        "run the command again; if this persists, see https://status.cloud.google.com",
    )


def _unknown_fix(lower: str, location: str) -> str:
    where = f"--zones {location}" if ZONE.match(location) else f"--filter zone~^{location}-"
    if "machine type" in lower or "machinetype" in lower:
        return f"pick a machine type offered there: `gcloud compute machine-types list {where}`"
    if "accelerator" in lower or "gpu" in lower:
        return (
            "pick a GPU type offered there and allowed on the machine type (N1 for T4, V100, "
            f"P100): `gcloud compute accelerator-types list {where}`"
        )
    if "zone" in lower or "region" in lower or "location" in lower:
        return "pick an existing zone or region: `gcloud compute zones list`"
    return ""


def _quota_fix(message: str, project: str) -> str:
    found = re.search(r"resource \\?\"([A-Z0-9_]+)\\?\"", message) or re.search(
        r"[Qq]uota (?:metric )?'([A-Za-z0-9_./-]+)'", message
    )
    which = f"the {found.group(1)} quota" if found else "the quota"
    return (
        f"ask for more of {which} at https://console.cloud.google.com/iam-admin/quotas"
        f"?project={project}, or ask for fewer or smaller nodes (--nodes, --machine-type, "
        "--gpus) or another region"
    )


def _operation_fix(message: str, where: _Where) -> str:
    """An operation that failed has left a cluster (in ERROR) behind: it must go first."""
    lower = message.lower()
    if "quota" in lower:
        then = _quota_fix(message, where.project)
    else:
        then = _unknown_fix(lower, where.location)
    return _delete_fix(where.name) + (f"; then {then}" if then else "")


def _delete_fix(name: str) -> str:
    return f"`mlbench cluster delete {name}` removes what was made"


def _ago(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s so far" if minutes else f"{secs} s so far"


def _credentials(spec: ClusterSpec, need_project: bool = True) -> tuple[Any, str]:
    """Application Default Credentials and the project to use: --project, else the one
    the credentials name (a key file's project_id, gcloud's configured project)."""
    try:
        import google.auth
        from google.auth import exceptions as auth_exceptions
    except ImportError as exc:
        raise _missing(exc) from exc
    try:
        credentials, found = google.auth.default(scopes=[SCOPE])
    except auth_exceptions.DefaultCredentialsError as exc:
        raise ClusterError("no Google Cloud credentials found", NO_CREDENTIALS_FIX) from exc
    project = spec.project or found or ""
    if need_project and not project:
        raise ClusterError(
            "no project: pass --project",
            "give --project PROJECT_ID, or `gcloud config set project PROJECT_ID`",
        )
    return credentials, project


def _client(credentials: Any) -> Any:
    try:
        from google.cloud import container_v1
    except ImportError as exc:
        raise _missing(exc) from exc
    options: dict[str, str] = {}
    endpoint = os.environ.get(API_ENDPOINT_ENV, "").strip()
    if endpoint:
        options["api_endpoint"] = endpoint
    return container_v1.ClusterManagerClient(
        credentials=credentials, transport="rest", client_options=options or None
    )


def _api_exceptions() -> Any:
    try:
        from google.api_core import exceptions
    except ImportError as exc:
        raise _missing(exc) from exc
    return exceptions


def _missing(exc: ImportError) -> ClusterError:
    return ClusterError(f"the Google Cloud libraries are not installed ({exc.name})", INSTALL_FIX)
