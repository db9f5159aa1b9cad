"""The AWS provider (clusters/aws.py) against moto's server: create, resume, delete, the
refusals and the token, each checked through boto3 on the server, not through the ledger
alone.

moto makes EKS clusters and node groups ACTIVE (and deleted) at once, so every waiter ends
at its first poll; the waiting constants are shortened only so that a regression fails fast
instead of polling for minutes. moto enforces no quota a create reaches (no VPC, gateway,
role or cluster limit), so the quota messages are checked on botocore errors parsed by
botocore from AWS's documented error bodies.
"""

import base64
import json
import os
import subprocess
import sys
import urllib.parse

import pytest

from mlbench_worker.client.clusters import aws
from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, Ledger, Resource

try:
    import boto3
except ImportError:
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("boto3 is not installed (pip install 'mlbench[cloud]')", allow_module_level=True)

REGION = "us-east-1"
NETWORK = ["vpc", "internet-gateway", "route-table", "subnet", "subnet"]
ORDER = ["iam-role", "iam-role", *NETWORK, "eks-cluster", "eks-nodegroup"]  # as made


@pytest.fixture
def server(moto_server, monkeypatch, tmp_path):
    """boto3 (the provider's and the tests') pointed at moto with fake credentials, none of
    the user's own AWS configuration in the way."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setattr(aws, "WAIT_DELAY_S", 0.1)
    monkeypatch.setattr(aws, "WAIT_LIMIT_S", 5)
    monkeypatch.setattr(aws, "DEPENDENCY_WAIT_S", 0.5)
    return moto_server


def client(service):
    return boto3.client(service, region_name=REGION)


def made(name):
    """Everything on the server that belongs to cluster `name`: by tag, or by name where
    the API cannot filter by tag (IAM roles, EKS)."""
    ec2, iam, eks = client("ec2"), client("iam"), client("eks")
    tag = [{"Name": "tag:mlbench-cluster", "Values": [name]}]
    clusters = [c for c in eks.list_clusters()["clusters"] if c == name]
    return {
        "eks-nodegroup": eks.list_nodegroups(clusterName=name)["nodegroups"] if clusters else [],
        "eks-cluster": clusters,
        "subnet": [s["SubnetId"] for s in ec2.describe_subnets(Filters=tag)["Subnets"]],
        "route-table": [
            t["RouteTableId"] for t in ec2.describe_route_tables(Filters=tag)["RouteTables"]
        ],
        "internet-gateway": [
            g["InternetGatewayId"]
            for g in ec2.describe_internet_gateways(Filters=tag)["InternetGateways"]
        ],
        "vpc": [v["VpcId"] for v in ec2.describe_vpcs(Filters=tag)["Vpcs"]],
        "iam-role": sorted(
            r["RoleName"]
            for r in iam.list_roles()["Roles"]
            if r["RoleName"].startswith(f"mlbench-{name}-")
        ),
    }


def everything():
    """Counts of what the provider could make, whoever it belongs to."""
    ec2, iam, eks = client("ec2"), client("iam"), client("eks")
    return {
        "vpcs": len(ec2.describe_vpcs()["Vpcs"]),
        "subnets": len(ec2.describe_subnets()["Subnets"]),
        "gateways": len(ec2.describe_internet_gateways()["InternetGateways"]),
        "roles": len(iam.list_roles()["Roles"]),
        "clusters": len(eks.list_clusters()["clusters"]),
    }


def create(name, lines=None, **options):
    provider = aws.Aws()
    spec = provider.complete(ClusterSpec("aws", name, **options))
    ledger = Ledger()
    access = provider.create(spec, ledger, (lines if lines is not None else []).append)
    return provider, spec, ledger, access


def interrupt_at_cluster(line):
    """A `say` that stops a create as Ctrl-C would, once the network exists."""
    if line.startswith("creating the EKS cluster"):
        raise KeyboardInterrupt


def test_create_makes_every_resource_tagged_and_recorded_in_order(server):
    lines = []
    _, spec, ledger, access = create("made", lines, nodes=3, disk_gb=40)
    assert (spec.region, spec.machine_type, spec.gpus) == (REGION, "m5.xlarge", 0)
    assert [r.kind for r in ledger.resources] == ORDER
    on_server = made("made")
    for kind, ids in on_server.items():
        assert sorted(r.id for r in ledger.find(kind)) == sorted(ids), kind

    eks, ec2, iam = client("eks"), client("ec2"), client("iam")
    cluster = eks.describe_cluster(name="made")["cluster"]
    subnets = on_server["subnet"]
    assert cluster["status"] == "ACTIVE"
    assert sorted(cluster["resourcesVpcConfig"]["subnetIds"]) == sorted(subnets)
    assert cluster["roleArn"] == iam.get_role(RoleName="mlbench-made-cluster-role")["Role"]["Arn"]
    assert cluster["tags"]["mlbench-cluster"] == "made"
    assert (access.server, access.ca_data) == (
        cluster["endpoint"],
        cluster["certificateAuthority"]["data"],
    )

    group = eks.describe_nodegroup(clusterName="made", nodegroupName="made-nodes")["nodegroup"]
    assert {k: group[k] for k in ("status", "instanceTypes", "capacityType", "diskSize")} == {
        "status": "ACTIVE",
        "instanceTypes": ["m5.xlarge"],
        "capacityType": "ON_DEMAND",
        "diskSize": 40,
    }
    assert group["scalingConfig"] == {"minSize": 3, "maxSize": 3, "desiredSize": 3}
    assert group["labels"] == {"mlbench-cluster": "made"}
    assert group["amiType"] == "AL2023_x86_64_STANDARD"
    assert group["tags"]["mlbench-cluster"] == "made"
    assert group["nodeRole"] == iam.get_role(RoleName="mlbench-made-node-role")["Role"]["Arn"]
    assert sorted(group["subnets"]) == sorted(subnets)

    node_policies = (
        "AmazonEKSWorkerNodePolicy AmazonEKS_CNI_Policy AmazonEC2ContainerRegistryReadOnly"
    )
    for role, service, policies in (
        ("cluster", "eks.amazonaws.com", {"AmazonEKSClusterPolicy"}),
        ("node", "ec2.amazonaws.com", set(node_policies.split())),
    ):
        name = f"mlbench-made-{role}-role"
        trust = iam.get_role(RoleName=name)["Role"]["AssumeRolePolicyDocument"]
        if isinstance(trust, str):
            trust = json.loads(urllib.parse.unquote(trust))
        assert trust["Statement"][0]["Principal"] == {"Service": service}
        attached = iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
        assert {p["PolicyName"] for p in attached} == policies
        tags = iam.list_role_tags(RoleName=name)["Tags"]
        assert {"Key": "mlbench-cluster", "Value": "made"} in tags

    (vpc_id,) = on_server["vpc"]
    (gateway,) = ec2.describe_internet_gateways(InternetGatewayIds=on_server["internet-gateway"])[
        "InternetGateways"
    ]
    assert gateway["Attachments"][0]["VpcId"] == vpc_id
    found = ec2.describe_subnets(SubnetIds=subnets)["Subnets"]
    assert len({s["AvailabilityZone"] for s in found}) == 2
    assert all(s["MapPublicIpOnLaunch"] and s["VpcId"] == vpc_id for s in found)
    (table,) = ec2.describe_route_tables(RouteTableIds=on_server["route-table"])["RouteTables"]
    default = [r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
    assert [r.get("GatewayId") for r in default] == [gateway["InternetGatewayId"]]
    assert sorted(a["SubnetId"] for a in table["Associations"] if "SubnetId" in a) == sorted(
        subnets
    )
    assert any("10-15 minutes" in line for line in lines)


def test_spot_and_gpu_nodes(server):
    _, spec, _, _ = create("spotty", machine_type="g4dn.xlarge", gpus=1, spot=True)
    group = client("eks").describe_nodegroup(clusterName="spotty", nodegroupName="spotty-nodes")
    assert group["nodegroup"]["capacityType"] == "SPOT"
    assert group["nodegroup"]["amiType"] == "AL2023_x86_64_NVIDIA"
    # gpus 0 means the instance type's own: g4dn.xlarge has one T4.
    assert aws.Aws().complete(ClusterSpec("aws", "x", machine_type="g4dn.xlarge")).gpus == 1


def test_delete_removes_everything_and_again_finds_it_all_gone(server):
    provider, spec, ledger, _ = create("gone")
    recorded = list(ledger.resources)
    removal = provider.delete(spec, ledger, [].append)
    assert removal.failed == []
    assert [r.kind for r in removal.removed] == ORDER[::-1]
    assert ledger.resources == []
    assert all(ids == [] for ids in made("gone").values()), made("gone")

    again = provider.delete(spec, Ledger(recorded), [].append)
    assert again.failed == [] and len(again.removed) == len(recorded)


def test_delete_reports_what_it_cannot_remove_and_removes_the_rest(server):
    provider, spec, ledger, _ = create("stuck")
    vpc = ledger.first("vpc").id
    client("ec2").create_subnet(VpcId=vpc, CidrBlock="192.168.128.0/24")  # not mlbench's
    removal = provider.delete(spec, ledger, [].append)
    assert [(r.kind, r.id) for r, _ in removal.failed] == [("vpc", vpc)]
    assert "DependencyViolation" in removal.failed[0][1]
    assert [r.kind for r in ledger.resources] == ["vpc"]
    assert made("stuck")["iam-role"] == [] and made("stuck")["eks-cluster"] == []


def test_a_name_taken_is_refused_and_nothing_is_made(server):
    eks = client("eks")
    eks.create_cluster(
        name="taken",
        roleArn="arn:aws:iam::123456789012:role/someone-elses",
        resourcesVpcConfig={"subnetIds": []},
    )
    before = everything()
    provider = aws.Aws()
    spec = provider.complete(ClusterSpec("aws", "taken"))
    ledger = Ledger()
    with pytest.raises(ClusterError) as refused:
        provider.create(spec, ledger, [].append)
    assert "taken" in str(refused.value) and REGION in str(refused.value)
    assert "another name" in refused.value.fix
    assert ledger.resources == [] and everything() == before


def test_an_interrupted_create_is_deleted_or_resumed_without_a_second_vpc(server):
    provider = aws.Aws()
    spec = provider.complete(ClusterSpec("aws", "halted"))
    ledger = Ledger()
    with pytest.raises(KeyboardInterrupt):
        provider.create(spec, ledger, interrupt_at_cluster)
    assert [r.kind for r in ledger.resources] == ORDER[:-2]
    assert made("halted")["eks-cluster"] == [] and len(made("halted")["vpc"]) == 1

    lines = []
    access = provider.create(spec, ledger, lines.append)
    assert access.server
    assert [r.kind for r in ledger.resources] == ORDER
    assert len(made("halted")["vpc"]) == 1 and len(made("halted")["subnet"]) == 2
    assert any(line.startswith("reusing the VPC") for line in lines)
    assert not any(line.startswith("creating the VPC") for line in lines)

    second = Ledger()
    spec2 = provider.complete(ClusterSpec("aws", "halted2"))
    with pytest.raises(KeyboardInterrupt):
        provider.create(spec2, second, interrupt_at_cluster)
    removal = provider.delete(spec2, second, [].append)
    assert removal.failed == [] and second.resources == []
    assert all(ids == [] for ids in made("halted2").values())


def test_a_failure_after_resources_exist_says_how_to_remove_them(server):
    provider = aws.Aws()
    spec = provider.complete(ClusterSpec("aws", "raced"))
    ledger = Ledger()
    with pytest.raises(KeyboardInterrupt):
        provider.create(spec, ledger, interrupt_at_cluster)
    client("eks").create_cluster(  # someone takes the name meanwhile
        name="raced", roleArn="arn:aws:iam::123456789012:role/x", resourcesVpcConfig={}
    )
    with pytest.raises(ClusterError) as refused:
        provider.create(spec, ledger, [].append)
    assert "mlbench cluster delete raced" in refused.value.fix
    assert "again to resume" in refused.value.fix


# AWS's error bodies as its API references document them, one per protocol.
BODIES = {
    "ec2": "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    "</Errors><RequestID>1</RequestID></Response>",
    "query": '<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>'
    "Sender</Type><Code>{code}</Code><Message>{message}</Message></Error></ErrorResponse>",
    "rest-json": '{{"message": "{message}"}}',
}


def _parsed_error(service, operation, status, code, message):
    """A ClientError as botocore raises it for AWS's answer, parsed by botocore's own
    parser for the service's protocol."""
    import botocore.awsrequest
    import botocore.exceptions
    import botocore.parsers
    import botocore.session

    model = botocore.session.get_session().get_service_model(service)
    protocol = model.metadata["protocol"]
    headers = {"x-amzn-ErrorType": code} if protocol == "rest-json" else {}
    response = {
        "status_code": status,
        "headers": botocore.awsrequest.HeadersDict(headers),  # as botocore's HTTP layer has them
        "body": BODIES[protocol].format(code=code, message=message).encode(),
    }
    parsed = botocore.parsers.create_parser(protocol).parse(
        response, model.operation_model(operation).output_shape
    )
    return botocore.exceptions.ClientError(parsed, operation)


ROLES_QUOTA = "Cannot exceed quota for RolesPerAccount: 1000"


@pytest.mark.parametrize(
    "service, operation, code, message, quota",
    [
        ("ec2", "CreateVpc", "VpcLimitExceeded", "The maximum number of VPCs", "VPCs per Region"),
        ("iam", "CreateRole", "LimitExceeded", ROLES_QUOTA, "RolesPerAccount"),
        ("eks", "CreateCluster", "ResourceLimitExceededException", "No", "Clusters per Region"),
    ],
)
def test_a_quota_exceeded_names_the_quota(service, operation, code, message, quota):
    error = _parsed_error(service, operation, 400, code, message)
    assert error.response["Error"]["Code"] == code
    found = aws.explain(error, ClusterSpec("aws", "q", region="eu-west-1"))
    assert "quota exceeded in eu-west-1" in str(found) and quota in str(found)
    assert "Service Quotas" in found.fix and "another region" in found.fix


def test_access_denied_names_the_permission():
    said = "User: arn:aws:iam::1:user/u is not authorized to perform: iam:CreateRole on x"
    found = aws.explain(
        _parsed_error("iam", "CreateRole", 403, "AccessDenied", said), ClusterSpec("aws", "a")
    )
    assert "iam:CreateRole" in found.fix
    bare = _parsed_error("ec2", "CreateVpc", 403, "UnauthorizedOperation", "not authorized")
    assert "ec2:CreateVpc" in aws.explain(bare, ClusterSpec("aws", "a")).fix


@pytest.mark.parametrize(
    "options, words, fix",
    [
        ({"machine_type": "m5.enormous"}, "m5.enormous", "g4dn.xlarge"),
        ({"region": "mars-north-1"}, "mars-north-1", "us-east-1"),
        ({"machine_type": "m5.xlarge", "gpus": 2}, "has 0 GPU", "--gpus 0"),
        ({"machine_type": "g4dn.xlarge", "gpus": 4}, "has 1 GPU", "--gpus 1"),
        ({"project": "p1"}, "--project", "AWS_PROFILE"),
        ({"zone": "us-east-1a"}, "--zone", "--region"),
        ({"gpu_type": "nvidia-tesla-t4"}, "--gpu-type", "--machine-type"),
    ],
)
def test_what_aws_cannot_do_is_refused_before_anything_is_made(server, options, words, fix):
    before = everything()
    with pytest.raises(ClusterError) as refused:
        aws.Aws().complete(ClusterSpec("aws", "refused", **options))
    assert words in str(refused.value) and fix in refused.value.fix
    assert everything() == before


def test_missing_credentials_say_how_to_give_them(server, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # not on an EC2 machine
    provider, spec = aws.Aws(), ClusterSpec("aws", "nocreds", region=REGION)
    for call in (
        lambda: provider.complete(spec),
        lambda: provider.create(spec, Ledger(), [].append),
        lambda: provider.delete(spec, Ledger([Resource("vpc", "vpc-1")]), [].append),
        lambda: provider.token(spec),
    ):
        with pytest.raises(ClusterError) as refused:
            call()
        assert "aws configure" in refused.value.fix and "AWS_PROFILE" in refused.value.fix


def test_token_is_a_presigned_caller_identity_url_for_the_cluster(server):
    credential = aws.Aws().token(ClusterSpec("aws", "tok", region=REGION))
    assert credential["kind"] == "ExecCredential"
    assert credential["apiVersion"] == "client.authentication.k8s.io/v1"
    assert credential["status"]["expirationTimestamp"].endswith("Z")
    token = credential["status"]["token"]
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    assert url.startswith(server + "/")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert "/us-east-1/sts/aws4_request" in query["X-Amz-Credential"][0]
    # moto cannot answer the URL as EKS's authenticator would ask STS: it routes a request
    # by its Authorization header or host, and a presigned GET to "/" has neither (it
    # answers as S3), nor does it check signatures.


def test_importing_the_provider_does_not_import_boto3():
    code = (
        "import sys, mlbench_worker.client.clusters.aws; "
        "assert not {'boto3', 'botocore'} & set(sys.modules), 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())


def test_without_boto3_the_fix_is_the_cloud_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # what `import boto3` finds uninstalled
    with pytest.raises(ClusterError) as refused:
        aws.Aws().complete(ClusterSpec("aws", "nob"))
    assert "mlbench[cloud]" in refused.value.fix
