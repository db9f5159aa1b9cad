"""What an EKS cluster stands on: its two IAM roles and its own VPC (aws.py builds on it).

Why a module of its own: these pieces are plain IAM and EC2 resources, made, reused and
removed the same way (made, recorded in the ledger the moment they exist, tagged
`mlbench-cluster=NAME`; reused on a resumed create when the ledger holds one that still
exists; removed with whatever AWS demands first: policies detached, gateway detached,
route tables disassociated), while aws.py holds the EKS cluster, the nodes and the errors.

Why each piece:
- the cluster role (trusted by eks.amazonaws.com, AmazonEKSClusterPolicy) lets EKS manage
  the control plane's network interfaces in our subnets;
- the node role (trusted by ec2.amazonaws.com; AmazonEKSWorkerNodePolicy,
  AmazonEKS_CNI_Policy, AmazonEC2ContainerRegistryReadOnly) lets the nodes join the
  cluster, give pods VPC addresses and pull images;
- a VPC of its own (192.168.0.0/16, DNS hostnames on, as EKS nodes need), so a delete
  cannot touch anything else in the account, with an internet gateway and a route table
  whose default route goes through it, and two public subnets in two availability zones
  (EKS requires two zones) that give nodes public addresses (MapPublicIpOnLaunch): the
  nodes reach the EKS endpoint, the image registries and the mlbench master without a NAT
  gateway, which would cost money by the hour. The subnets carry kubernetes.io/role/elb=1
  so a Service of type LoadBalancer finds them.

Also here: `Clients`, the boto3 session of a region, which checks for boto3 and for
credentials before anything is asked of AWS. Functions raise botocore's errors as they come;
aws.py turns them into ClusterError.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, Ledger, Resource

TAG = "mlbench-cluster"
VPC_CIDR = "192.168.0.0/16"
SUBNET_CIDRS = ("192.168.0.0/19", "192.168.32.0/19")
CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
)
CREDENTIALS_FIX = (
    "run `aws configure`, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
)


class TooFewZones(Exception):
    """A region where two public subnets in two zones cannot be made."""


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise ClusterError(
            "the AWS provider needs boto3, which is not installed", "pip install 'mlbench[cloud]'"
        ) from None
    return boto3


def eks_regions() -> set[str]:
    """The regions EKS is offered in, every partition's, from botocore's endpoint data."""
    session = _boto3().session.Session()
    return {
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("eks", partition_name=partition)
    }


class Clients:
    """boto3 clients of one region (IAM's is global), made once each. Made only where
    boto3 is installed and credentials are found: else ClusterError with the fix."""

    def __init__(self, region: str) -> None:
        boto3 = _boto3()
        from botocore.config import Config
        from botocore.exceptions import ProfileNotFound

        try:
            self.session = boto3.session.Session(region_name=region)
            credentials = self.session.get_credentials()
        except ProfileNotFound as error:
            raise ClusterError(str(error), f"unset AWS_PROFILE, or {CREDENTIALS_FIX}") from None
        if credentials is None:
            raise ClusterError("no AWS credentials found", CREDENTIALS_FIX)
        self.region = region
        self._config = Config(retries={"mode": "standard", "max_attempts": 5})
        self._made: dict[str, Any] = {}

    @property
    def partition(self) -> str:
        """ "aws", or "aws-cn" / "aws-us-gov" where the region is there: managed policies'
        ARNs name it."""
        try:
            return self.session.get_partition_for_region(self.region)
        except Exception:  # an unknown region: complete() refuses it before any create
            return "aws"

    def __call__(self, service: str) -> Any:
        if service not in self._made:
            self._made[service] = self.session.client(service, config=self._config)
        return self._made[service]


def gone(error: Exception) -> bool:
    """Whether a botocore ClientError says the thing does not exist (any service)."""
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
    return code in ("NoSuchEntity", "ResourceNotFoundException") or code.endswith(".NotFound")


def exists(call: Callable[[], Any]) -> Any:
    """`call()`'s answer, or None where it says the thing is gone."""
    from botocore.exceptions import ClientError

    try:
        return call()
    except ClientError as error:
        if gone(error):
            return None
        raise


def tags(spec: ClusterSpec, name: str) -> dict[str, str]:
    return {TAG: spec.name, "Name": name}


def _ec2_tags(kind: str, tag: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tag.items()]}]


def _held(ledger: Ledger, kind: str, still: Callable[[Resource], Any]) -> Any:
    """The answer of `still` about the ledger's first `kind` that still exists; those
    already gone are dropped from the ledger, so that it holds only what a delete can find."""
    for resource in ledger.find(kind):
        found = exists(lambda r=resource: still(r))
        if found:
            return found
        ledger.remove(resource)
    return None


def role(
    iam: Any,
    spec: ClusterSpec,
    ledger: Ledger,
    say: Callable[[str], None],
    purpose: str,
    service: str,
    policies: tuple[str, ...],
    partition: str,
) -> str:
    """The ARN of the cluster's role for `purpose` ("cluster" or "node"), trusted by
    `service` with the AWS-managed `policies` attached, made unless the ledger holds it."""
    name = f"mlbench-{spec.name}-{purpose}-role"
    found = None
    for resource in ledger.find("iam-role"):
        if resource.id == name:
            found = exists(lambda: iam.get_role(RoleName=name))
            if not found:
                ledger.remove(resource)
    if found:
        say(f"reusing the IAM role {name}")
        arn = found["Role"]["Arn"]
    else:
        say(f"creating the IAM role {name} (for {service})")
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
            ],
        }
        made = iam.create_role(
            RoleName=name,
            AssumeRolePolicyDocument=json.dumps(trust),
            Description=f"mlbench cluster {spec.name}: {purpose} role",
            Tags=[{"Key": k, "Value": v} for k, v in tags(spec, name).items()],
        )
        arn = made["Role"]["Arn"]
        ledger.add(Resource("iam-role", name, {"arn": arn, "purpose": purpose}))
    for policy in policies:  # attaching twice is no error: a resumed create repeats it
        iam.attach_role_policy(RoleName=name, PolicyArn=f"arn:{partition}:iam::aws:policy/{policy}")
    return arn


def network(
    ec2: Any, spec: ClusterSpec, ledger: Ledger, say: Callable[[str], None], wait: dict[str, int]
) -> list[str]:
    """The ids of the cluster's two public subnets, and the VPC, internet gateway and
    route table under them; each made unless the ledger holds it and it still exists."""
    vpc = _held(ledger, "vpc", lambda r: ec2.describe_vpcs(VpcIds=[r.id])["Vpcs"][0])
    if vpc:
        say(f"reusing the VPC {vpc['VpcId']}")
    else:
        say(f"creating the VPC ({VPC_CIDR})")
        tag = tags(spec, f"mlbench-{spec.name}-vpc")
        vpc = ec2.create_vpc(CidrBlock=VPC_CIDR, TagSpecifications=_ec2_tags("vpc", tag))["Vpc"]
        ledger.add(Resource("vpc", vpc["VpcId"], {"region": spec.region}))
        ec2.get_waiter("vpc_available").wait(VpcIds=[vpc["VpcId"]], WaiterConfig=wait)
        ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], EnableDnsHostnames={"Value": True})
    vpc_id = vpc["VpcId"]

    get = ec2.describe_internet_gateways
    gateway = _held(
        ledger, "internet-gateway", lambda r: get(InternetGatewayIds=[r.id])["InternetGateways"][0]
    )
    if gateway:
        say(f"reusing the internet gateway {gateway['InternetGatewayId']}")
    else:
        say("creating the internet gateway (the nodes' way out to the internet)")
        tag = tags(spec, f"mlbench-{spec.name}-gateway")
        made = ec2.create_internet_gateway(TagSpecifications=_ec2_tags("internet-gateway", tag))
        gateway = made["InternetGateway"]
        ledger.add(Resource("internet-gateway", gateway["InternetGatewayId"], {"vpc": vpc_id}))
    gateway_id = gateway["InternetGatewayId"]
    if not any(a.get("VpcId") == vpc_id for a in gateway.get("Attachments", [])):
        ec2.attach_internet_gateway(InternetGatewayId=gateway_id, VpcId=vpc_id)

    get = ec2.describe_route_tables
    table = _held(ledger, "route-table", lambda r: get(RouteTableIds=[r.id])["RouteTables"][0])
    if table:
        say(f"reusing the route table {table['RouteTableId']}")
    else:
        say("creating the route table (default route through the internet gateway)")
        tag = tags(spec, f"mlbench-{spec.name}-routes")
        made = ec2.create_route_table(VpcId=vpc_id, TagSpecifications=_ec2_tags("route-table", tag))
        table = made["RouteTable"]
        ledger.add(Resource("route-table", table["RouteTableId"], {"vpc": vpc_id}))
    table_id = table["RouteTableId"]
    default = [r for r in table.get("Routes", []) if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
    if not default:
        ec2.create_route(
            RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway_id
        )
    elif default[0].get("GatewayId") != gateway_id:
        ec2.replace_route(
            RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway_id
        )
    associated = {a.get("SubnetId") for a in table.get("Associations", [])}
    return _subnets(ec2, spec, ledger, say, vpc_id, table_id, associated)


def _subnets(
    ec2: Any,
    spec: ClusterSpec,
    ledger: Ledger,
    say: Callable[[str], None],
    vpc_id: str,
    table_id: str,
    associated: set[str | None],
) -> list[str]:
    held = []
    for resource in ledger.find("subnet"):
        found = exists(lambda r=resource: ec2.describe_subnets(SubnetIds=[r.id])["Subnets"][0])
        if found and found["VpcId"] == vpc_id:
            held.append(found)
        else:
            ledger.remove(resource)
    zones = ec2.describe_availability_zones(
        Filters=[
            {"Name": "state", "Values": ["available"]},
            {"Name": "zone-type", "Values": ["availability-zone"]},
        ]
    )["AvailabilityZones"]
    used_zones = {s["AvailabilityZone"] for s in held}
    free_zones = sorted(z["ZoneName"] for z in zones if z["ZoneName"] not in used_zones)
    free_cidrs = [c for c in SUBNET_CIDRS if c not in {s["CidrBlock"] for s in held}]
    for subnet in held:
        say(f"reusing the subnet {subnet['SubnetId']} in {subnet['AvailabilityZone']}")
    for zone, cidr in list(zip(free_zones, free_cidrs, strict=False))[: 2 - len(held)]:
        say(f"creating a public subnet in {zone} ({cidr})")
        tag = {**tags(spec, f"mlbench-{spec.name}-{zone}"), "kubernetes.io/role/elb": "1"}
        subnet = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=cidr,
            AvailabilityZone=zone,
            TagSpecifications=_ec2_tags("subnet", tag),
        )["Subnet"]
        ledger.add(Resource("subnet", subnet["SubnetId"], {"zone": zone, "vpc": vpc_id}))
        held.append(subnet)
    for subnet in held:
        ec2.modify_subnet_attribute(
            SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True}
        )
        if subnet["SubnetId"] not in associated:
            ec2.associate_route_table(RouteTableId=table_id, SubnetId=subnet["SubnetId"])
    if len(held) < 2:
        raise TooFewZones(f"{spec.region} offers fewer than the two availability zones EKS needs")
    return [s["SubnetId"] for s in held]


def remove(
    clients: Callable[[str], Any], resource: Resource, patience: float, delay: float
) -> bool:
    """Remove one IAM or VPC resource; False when `resource.kind` is not one of them.
    A piece still in use (DependencyViolation: EKS's network interfaces outlive the cluster
    by minutes) is tried again for `patience` seconds."""
    if resource.kind == "iam-role":
        _remove_role(clients("iam"), resource.id)
        return True
    ec2 = clients("ec2")
    if resource.kind == "subnet":
        tables = ec2.describe_route_tables(
            Filters=[{"Name": "association.subnet-id", "Values": [resource.id]}]
        )["RouteTables"]
        for table in tables:
            for association in table.get("Associations", []):
                if association.get("SubnetId") == resource.id:
                    ec2.disassociate_route_table(
                        AssociationId=association["RouteTableAssociationId"]
                    )
        step = lambda: ec2.delete_subnet(SubnetId=resource.id)  # noqa: E731
    elif resource.kind == "route-table":
        step = lambda: ec2.delete_route_table(RouteTableId=resource.id)  # noqa: E731
    elif resource.kind == "internet-gateway":
        step = lambda: _remove_gateway(ec2, resource.id)  # noqa: E731
    elif resource.kind == "vpc":
        step = lambda: ec2.delete_vpc(VpcId=resource.id)  # noqa: E731
    else:
        return False
    _patiently(step, patience, delay)
    return True


def _remove_gateway(ec2: Any, gateway_id: str) -> None:
    found = ec2.describe_internet_gateways(InternetGatewayIds=[gateway_id])["InternetGateways"]
    for attachment in found[0].get("Attachments", []) if found else []:
        ec2.detach_internet_gateway(InternetGatewayId=gateway_id, VpcId=attachment["VpcId"])
    ec2.delete_internet_gateway(InternetGatewayId=gateway_id)


def _remove_role(iam: Any, name: str) -> None:
    """IAM refuses to delete a role with policies or an instance profile (EKS makes one
    for a node group's role), so those go first."""
    for policy in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
        iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
    for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
        iam.delete_role_policy(RoleName=name, PolicyName=policy)
    for profile in iam.list_instance_profiles_for_role(RoleName=name)["InstanceProfiles"]:
        iam.remove_role_from_instance_profile(
            InstanceProfileName=profile["InstanceProfileName"], RoleName=name
        )
    iam.delete_role(RoleName=name)


def _patiently(step: Callable[[], Any], patience: float, delay: float) -> None:
    from botocore.exceptions import ClientError

    deadline = time.monotonic() + patience
    while True:
        try:
            step()
            return
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code != "DependencyViolation" or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
