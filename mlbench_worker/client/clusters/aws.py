# Over 400 lines: the four methods, the EKS steps and the errors they share (IAM, VPC: aws_network.py)
"""The AWS provider of `mlbench cluster create aws NAME`: an EKS cluster with one managed
node group, made, resumed and removed through boto3 (the contract: spec.py's `Provider`).

Why it makes what it makes (create, in this order, each piece recorded in the ledger the
moment it exists and tagged `mlbench-cluster=NAME`):
1. two IAM roles, one EKS assumes to run the control plane, one the nodes assume to join
   it (aws_network.py says why each policy);
2. a VPC of its own with an internet gateway, a route table and two public subnets in two
   zones (EKS requires two; public, so nodes need no NAT gateway): a delete of this VPC
   cannot touch anything else in the account;
3. the EKS cluster NAME in those subnets, waited for until ACTIVE (10-15 minutes on AWS);
4. one managed node group NAME-nodes: the instance type, on-demand or spot, a fixed size
   (min = max = desired: a benchmark wants the machines it asked for, not an autoscaler's
   guess), the disk, the Kubernetes label `mlbench-cluster=NAME`, and an Amazon Linux 2023
   image with the NVIDIA (or Neuron) drivers where the instance type has GPUs.
A create run again with the same ledger reuses what still exists (an interrupted create is
resumed, not doubled); a delete removes the ledger's resources newest first.

Access: EKS makes the identity that creates the cluster its administrator, and `token`
signs for that identity the presigned STS GetCallerIdentity URL that EKS's authenticator
accepts, as `aws eks get-token` does (no aws-cli needed).

boto3 is the optional extra `cloud` and is imported only inside functions: importing this
module costs nothing (`mlbench --help` stays fast). Clients honour AWS_ENDPOINT_URL, so a
local emulator stands in for AWS.

Exercised only against moto 5.2.5's server (tests/clusters/test_aws.py), never against AWS.
moto answers every call create and delete make, and makes clusters and node groups ACTIVE
(and deleted) at once, so these paths ran only in their first poll: waiting minutes, a
cluster or node group that FAILS (its health issues), the retry while a new IAM role is not
yet usable by EKS, and the retry while EKS's network interfaces still hold the subnets.
moto does not check what EKS would (that the roles and subnets exist, the AMI type, the
signature of the token) and makes none of EKS's own pieces (its security group, network
interfaces, instance profile, instances), so removing a VPC still holding them is
unexercised. It enforces no quota create reaches: the quota mapping is tested on botocore
errors parsed from AWS's documented error bodies.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from mlbench_worker.client.clusters import aws_network as net
from mlbench_worker.client.clusters.spec import (
    ClusterError,
    ClusterSpec,
    KubeAccess,
    Ledger,
    Removal,
    Resource,
)

DEFAULT_REGION, DEFAULT_MACHINE, DEFAULT_DISK_GB, DEFAULT_NODES = "us-east-1", "m5.xlarge", 50, 2
WAIT_DELAY_S = 30.0  # between polls of a waiter (EKS's own waiters poll every 30 s)
WAIT_LIMIT_S = 40 * 60  # give up waiting for a cluster or a node group after this
DEPENDENCY_WAIT_S = 10 * 60  # a subnet or VPC still in use is retried this long on delete
IAM_WAIT_S = 2 * 60  # a new role may not be usable by EKS for a minute or so
TOKEN_URL_S, TOKEN_LIFE_MIN = 60, 14  # as aws-cli's `eks get-token`
EXAMPLES = "m5.xlarge (4 vCPUs, 16 GiB), or with a GPU g4dn.xlarge (1 T4) or g5.xlarge (1 A10G)"
# Quotas by error code, as the Service Quotas console names them.
QUOTAS = {
    "VpcLimitExceeded": "Amazon VPC: VPCs per Region",
    "InternetGatewayLimitExceeded": "Amazon VPC: Internet gateways per Region",
    "AddressLimitExceeded": "Amazon EC2: EC2-VPC Elastic IPs",
    "VcpuLimitExceeded": "Amazon EC2: Running On-Demand instances (vCPUs of the family)",
    "MaxSpotInstanceCountExceeded": "Amazon EC2: All Spot Instance Requests (vCPUs)",
}
CREDENTIAL_CODES = ("InvalidClientTokenId", "UnrecognizedClientException", "AuthFailure")
CREDENTIAL_CODES += ("SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException")
WORDS = {"eks-nodegroup": "node group", "eks-cluster": "EKS cluster", "iam-role": "IAM role"}
WORDS |= {"vpc": "VPC", "internet-gateway": "internet gateway", "route-table": "route table"}


def _waiting() -> dict[str, int]:
    delay = max(WAIT_DELAY_S, 0)
    return {"Delay": int(delay), "MaxAttempts": max(1, int(WAIT_LIMIT_S // max(delay, 1)))}


@contextlib.contextmanager
def _aws_errors(spec: ClusterSpec, ledger: Ledger | None = None) -> Iterator[None]:
    """botocore's errors as ClusterError; during a create, with how to remove or resume
    what the ledger already holds."""
    try:
        yield
    except Exception as error:
        found = _translate(error, spec)
        if found is None:
            raise
        if ledger is not None and ledger.resources:
            found.fix = (found.fix + "; " if found.fix else "") + (
                f"what was made is recorded: `mlbench cluster delete {spec.name}` removes "
                f"it, or run `mlbench cluster create aws {spec.name}` again to resume"
            )
        if found is error:
            raise
        raise found from error


class Aws:
    """The `Provider` for Amazon EKS."""

    name = "aws"

    def complete(self, spec: ClusterSpec) -> ClusterSpec:
        """Defaults filled in, Google-only options refused, and the region and instance
        type checked before anything costs money. gpus 0 becomes the type's GPU count."""
        refused = {
            "project": "AWS picks the account from your credentials (AWS_PROFILE)",
            "zone": "an EKS cluster spans a region: give --region (mlbench picks two zones)",
            "gpu_type": f"the instance type decides the GPU: give a --machine-type, e.g. {EXAMPLES}",
        }
        for option, fix in refused.items():
            if getattr(spec, option):
                flag = "--" + option.replace("_", "-")
                raise ClusterError(f"{flag} is a Google Cloud option AWS has no use for", fix)
        spec = dataclasses.replace(
            spec,
            region=spec.region or DEFAULT_REGION,
            machine_type=spec.machine_type or DEFAULT_MACHINE,
            disk_gb=spec.disk_gb or DEFAULT_DISK_GB,
            nodes=spec.nodes or DEFAULT_NODES,
        )
        if spec.nodes < 1 or spec.gpus < 0:
            raise ClusterError("nodes and gpus cannot be negative", "give --nodes 1 or more")
        if spec.disk_gb < 20:
            raise ClusterError(f"a {spec.disk_gb} GB disk is too small", "give at least 20 GB")
        regions = net.eks_regions()
        if spec.region not in regions:
            raise ClusterError(
                f"EKS is not offered in region {spec.region!r}",
                "give one of " + ", ".join(sorted(regions)),
            )
        info = _instance_type(net.Clients(spec.region), spec)
        gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
        if spec.gpus and spec.gpus != gpus:
            raise ClusterError(
                f"{spec.machine_type} has {gpus} GPU(s), not the {spec.gpus} asked for",
                f"give --gpus {gpus}, or a --machine-type with {spec.gpus}: `aws ec2 "
                "describe-instance-types --filters Name=instance-type,Values=g*,p*` lists them",
            )
        return dataclasses.replace(spec, gpus=gpus)

    def create(self, spec: ClusterSpec, ledger: Ledger, say: Callable[[str], None]) -> KubeAccess:
        """Everything EKS needs, in the order the module docstring gives."""
        clients = net.Clients(spec.region or DEFAULT_REGION)
        eks, iam = clients("eks"), clients("iam")
        with _aws_errors(spec, ledger):
            if ledger.first("eks-cluster") is None:
                say(f"checking that no EKS cluster {spec.name} exists in {clients.region}")
                if net.exists(lambda: eks.describe_cluster(name=spec.name)):
                    raise _taken(
                        spec, f"an EKS cluster named {spec.name} exists in {clients.region}"
                    )
            roles = [
                net.role(iam, spec, ledger, say, purpose, service, policies, clients.partition)
                for purpose, service, policies in (
                    ("cluster", "eks.amazonaws.com", net.CLUSTER_POLICIES),
                    ("node", "ec2.amazonaws.com", net.NODE_POLICIES),
                )
            ]
            subnets = net.network(clients("ec2"), spec, ledger, say, _waiting())
            cluster = _cluster(eks, spec, ledger, say, roles[0], subnets)
            _nodes(clients, spec, ledger, say, roles[1], subnets)
        return KubeAccess(cluster["endpoint"], cluster["certificateAuthority"]["data"])

    def delete(self, spec: ClusterSpec, ledger: Ledger, say: Callable[[str], None]) -> Removal:
        """The ledger's resources newest first; one already gone counts as removed. After a
        failure the rest is still tried, but without waiting for pieces still in use."""
        clients = net.Clients(spec.region or DEFAULT_REGION)
        removal = Removal()
        for resource in reversed(list(ledger.resources)):
            say(f"removing the {WORDS.get(resource.kind, resource.kind)} {resource.id}")
            try:
                patience = 0 if removal.failed else DEPENDENCY_WAIT_S
                if not _remove(clients, spec, resource, say, patience):
                    removal.failed.append((resource, "not a kind the AWS provider makes"))
                    continue
            except Exception as error:
                if not net.gone(error):
                    reason = _translate(error, spec) or f"{type(error).__name__}: {error}"
                    removal.failed.append((resource, str(reason)))
                    continue
            ledger.remove(resource)
            removal.removed.append(resource)
        return removal

    def token(self, spec: ClusterSpec) -> dict[str, Any]:
        """What `aws eks get-token --cluster-name NAME` prints: a presigned STS
        GetCallerIdentity URL with the header x-k8s-aws-id=NAME signed in, so that EKS
        learns who signed it and that the token was made for this cluster."""
        sts = net.Clients(spec.region or DEFAULT_REGION)("sts")

        def add_cluster_header(request: Any, **_: Any) -> None:
            request.headers["x-k8s-aws-id"] = spec.name

        sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
        with _aws_errors(spec):
            url = sts.generate_presigned_url(
                "get_caller_identity", Params={}, ExpiresIn=TOKEN_URL_S, HttpMethod="GET"
            )
        encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=TOKEN_LIFE_MIN)
        return {
            "kind": "ExecCredential",
            "apiVersion": "client.authentication.k8s.io/v1",
            "spec": {},
            "status": {
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "token": "k8s-aws-v1." + encoded,
            },
        }


def _cluster(
    eks: Any,
    spec: ClusterSpec,
    ledger: Ledger,
    say: Callable[[str], None],
    role: str,
    subnets: list[str],
) -> dict[str, Any]:
    held = ledger.first("eks-cluster")
    found = held and net.exists(lambda: eks.describe_cluster(name=held.id))
    if found:
        status = found["cluster"]["status"]
        say(f"reusing the EKS cluster {spec.name} ({status})")
        if status == "DELETING":
            raise ClusterError(
                f"the EKS cluster {spec.name} is being deleted",
                f"let `mlbench cluster delete {spec.name}` finish",
            )
    else:
        if held:
            ledger.remove(held)
        say(f"creating the EKS cluster {spec.name}")
        request = {
            "name": spec.name,
            "roleArn": role,
            "resourcesVpcConfig": {"subnetIds": subnets, "endpointPublicAccess": True},
            "tags": net.tags(spec, spec.name),
        }
        if spec.kubernetes_version:
            request["version"] = spec.kubernetes_version
        _until_role_usable(lambda: eks.create_cluster(**request))
        ledger.add(Resource("eks-cluster", spec.name, {"region": spec.region}))
    say("waiting for the EKS cluster to be ACTIVE (it usually takes 10-15 minutes)")
    eks.get_waiter("cluster_active").wait(name=spec.name, WaiterConfig=_waiting())
    return eks.describe_cluster(name=spec.name)["cluster"]


def _nodes(
    clients: net.Clients,
    spec: ClusterSpec,
    ledger: Ledger,
    say: Callable[[str], None],
    role: str,
    subnets: list[str],
) -> None:
    eks, name = clients("eks"), f"{spec.name}-nodes"
    held = ledger.first("eks-nodegroup")
    where = {"clusterName": spec.name, "nodegroupName": held.id if held else name}
    found = held and net.exists(lambda: eks.describe_nodegroup(**where))
    if found:
        say(f"reusing the node group {held.id} ({found['nodegroup']['status']})")
    else:
        if held:
            ledger.remove(held)
        where["nodegroupName"] = name
        capacity = "SPOT" if spec.spot else "ON_DEMAND"
        say(f"creating the node group {name}: {spec.nodes} x {spec.machine_type}, {capacity}")
        size = {"minSize": spec.nodes, "maxSize": spec.nodes, "desiredSize": spec.nodes}
        request = {
            **where,
            "scalingConfig": size,
            "diskSize": spec.disk_gb,
            "subnets": subnets,
            "instanceTypes": [spec.machine_type],
            "amiType": _ami_type(_instance_type(clients, spec)),
            "nodeRole": role,
            "labels": {net.TAG: spec.name},
            "tags": net.tags(spec, name),
            "capacityType": capacity,
        }
        _until_role_usable(lambda: eks.create_nodegroup(**request))
        ledger.add(Resource("eks-nodegroup", name, {"cluster": spec.name}))
    say("waiting for the nodes to be ACTIVE (it usually takes 3-5 minutes)")
    eks.get_waiter("nodegroup_active").wait(**where, WaiterConfig=_waiting())


def _remove(
    clients: net.Clients,
    spec: ClusterSpec,
    resource: Resource,
    say: Callable[[str], None],
    patience: float,
) -> bool:
    """Remove one resource, waiting until EKS's are gone; False for a kind not ours."""
    eks = clients("eks")
    if resource.kind == "eks-nodegroup":
        where = {
            "clusterName": resource.detail.get("cluster", spec.name),
            "nodegroupName": resource.id,
        }
        describe, delete, waiter = eks.describe_nodegroup, eks.delete_nodegroup, "nodegroup_deleted"
    elif resource.kind == "eks-cluster":
        where = {"name": resource.id}
        describe, delete, waiter = eks.describe_cluster, eks.delete_cluster, "cluster_deleted"
    else:
        return net.remove(clients, resource, patience, WAIT_DELAY_S)
    found = net.exists(lambda: describe(**where))
    if found:
        if found[resource.kind[4:]]["status"] != "DELETING":
            delete(**where)
        say(f"waiting for the {WORDS[resource.kind]} to be gone (it usually takes 3-10 minutes)")
        eks.get_waiter(waiter).wait(**where, WaiterConfig=_waiting())
    return True


def _instance_type(clients: net.Clients, spec: ClusterSpec) -> dict[str, Any]:
    from botocore.exceptions import ClientError

    with _aws_errors(spec):
        try:
            found = clients("ec2").describe_instance_types(InstanceTypes=[spec.machine_type])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "InvalidInstanceType":
                raise
            raise ClusterError(
                f"instance type {spec.machine_type!r} does not exist in {clients.region}",
                f"give a --machine-type that does, e.g. {EXAMPLES}",
            ) from None
    return found["InstanceTypes"][0]


def _ami_type(info: dict[str, Any]) -> str:
    """Amazon Linux 2023 for the type's processor, with the drivers its accelerators need."""
    arm = "x86_64" not in info.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
    if info.get("NeuronInfo") and not arm:
        return "AL2023_x86_64_NEURON"
    kind = "NVIDIA" if info.get("GpuInfo", {}).get("Gpus") else "STANDARD"
    return f"AL2023_{'ARM_64' if arm else 'x86_64'}_{kind}"


def _until_role_usable(call: Callable[[], Any]) -> Any:
    """IAM is eventually consistent: EKS may refuse a role made seconds ago
    (InvalidParameterException, "... role ... cannot be assumed") for a minute or so."""
    from botocore.exceptions import ClientError

    deadline = time.monotonic() + IAM_WAIT_S
    while True:
        try:
            return call()
        except ClientError as error:
            details = error.response.get("Error", {})
            if details.get("Code") != "InvalidParameterException" or time.monotonic() > deadline:
                raise
            if "role" not in details.get("Message", "").lower():
                raise
        time.sleep(min(WAIT_DELAY_S, 10))


def _taken(spec: ClusterSpec, message: str) -> ClusterError:
    return ClusterError(
        message,
        "give the cluster another name, or, if it is one mlbench made here, "
        f"`mlbench cluster delete {spec.name}` removes it",
    )


def explain(error: Exception, spec: ClusterSpec) -> ClusterError:
    """A botocore ClientError as something the user can act on: a name taken, a quota
    exceeded (which one, and where to raise it), a permission missing (which one)."""
    details = getattr(error, "response", {}).get("Error", {})
    code, message = details.get("Code", ""), details.get("Message", "")
    operation = getattr(error, "operation_name", "")
    region = spec.region or DEFAULT_REGION
    if code == "ResourceInUseException" and operation == "CreateCluster":
        return _taken(spec, f"an EKS cluster named {spec.name} exists in {region}")
    if code == "EntityAlreadyExists" and operation == "CreateRole":
        return _taken(
            spec,
            f"{message} (IAM names are account-wide: a cluster {spec.name} "
            "in any region takes them)",
        )
    if code in QUOTAS or "LimitExceeded" in code or code.endswith("QuotaExceeded"):
        quota = QUOTAS.get(code, "")
        if code == "ResourceLimitExceededException":
            per = "Managed node groups per cluster" if operation == "CreateNodegroup" else ""
            quota = "Amazon EKS: " + (per or "Clusters per Region")
        elif code == "LimitExceeded":  # IAM names the quota in its message
            found = re.search(r"quota for (\w+)", message)
            quota = "AWS IAM: " + (found.group(1) if found else message)
        return ClusterError(
            f"AWS quota exceeded in {region}: {quota or code} ({message})",
            "ask for more in the Service Quotas console (https://console.aws.amazon.com/"
            f"servicequotas/home?region={region}), or use another region (--region)",
        )
    if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
        found = re.search(r"perform: ([\w-]+:\w+)", message)
        action = found.group(1) if found else _action(operation)
        return ClusterError(
            f"AWS denied {action} ({message})",
            f"ask your AWS administrator to allow {action} for your identity "
            "(`aws sts get-caller-identity` names it)",
        )
    if code in CREDENTIAL_CODES:
        return ClusterError(
            f"AWS refused the credentials: {code} ({message})",
            f"renew them (`aws sso login` for SSO), or {net.CREDENTIALS_FIX}",
        )
    return ClusterError(f"AWS {operation or 'call'} failed: {code}: {message}")


def _action(operation: str) -> str:
    """The IAM action of an operation, found in botocore's models of the services used."""
    import botocore.session

    session = botocore.session.get_session()
    for service in ("iam", "ec2", "eks", "sts"):
        if operation in session.get_service_model(service).operation_names:
            return f"{service}:{operation}"
    return operation


def _translate(error: Exception, spec: ClusterSpec) -> ClusterError | None:
    """ClusterError for botocore's errors; None for anything else (a bug: let it show)."""
    from botocore import exceptions as bx

    if isinstance(error, ClusterError):
        return error
    if isinstance(error, bx.NoCredentialsError | bx.PartialCredentialsError):
        return ClusterError(f"no usable AWS credentials ({error})", net.CREDENTIALS_FIX)
    if isinstance(error, bx.ClientError):
        return explain(error, spec)
    if isinstance(error, bx.WaiterError):
        return _waiter_failed(error, spec)
    if isinstance(error, bx.EndpointConnectionError | bx.ConnectionError):
        fix = "check the network, and AWS_ENDPOINT_URL if it is set"
        return ClusterError(f"cannot reach AWS ({error})", fix)
    if isinstance(error, net.TooFewZones):
        return ClusterError(str(error), "use another region (--region)")
    return None


def _waiter_failed(error: Any, spec: ClusterSpec) -> ClusterError:
    """Why a cluster or node group did not become ACTIVE (or gone): its status and health
    issues, which for nodes that cannot start name the EC2 quota (VcpuLimitExceeded)."""
    last = error.last_response or {}
    if "Error" in last:  # e.g. the cluster vanished while waited for
        details = last["Error"]
        return ClusterError(f"{error.name}: {details.get('Code')}: {details.get('Message')}")
    what = "node group" if "nodegroup" in last else "EKS cluster"
    thing = last.get("nodegroup") or last.get("cluster") or {}
    found = thing.get("health", {}).get("issues", [])
    issues = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in found)
    status = thing.get("status", "?")
    if "Max attempts exceeded" in str(error):
        text = f"the {what} is still {status} after {WAIT_LIMIT_S // 60} minutes"
    else:
        text = f"the {what} is {status}" + (f": {issues}" if issues else "")
    fix = ""
    if "LimitExceeded" in issues or "quota" in issues.lower():
        kind = "Spot" if spec.spot else "On-Demand"
        fix = (
            f"raise the EC2 quota of Running {kind} instances of {spec.machine_type}'s family "
            "(vCPUs) in the Service Quotas console, or use another region (--region)"
        )
    return ClusterError(text, fix)
