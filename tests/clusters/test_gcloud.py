"""The GKE provider against a local fake of Google's API (tests/clusters/fake_gke.py):
the real google-cloud-container client over REST and the real google-auth, with a
service account key made here whose token_uri is the fake's, so the signed JWTs and the
token exchange are real too. Nothing here reaches Google."""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

try:
    import google.auth  # noqa: F401
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.cloud import container_v1  # noqa: F401
except ImportError as exc:  # the "cloud" extra is not installed
    why = f"google-cloud-container is not installed ({exc}): pip install 'mlbench[cloud]'"
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)

from mlbench_worker.client.clusters import gcloud
from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, Ledger, Resource
from tests.clusters.fake_gke import CA_PEM, Server

pytestmark = pytest.mark.timeout(60)

PROJECT = "mlb-test-project"
EMAIL = f"bench@{PROJECT}.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def gke(key, tmp_path, monkeypatch):
    """The fake, and the environment a user of it would have: a key file as
    GOOGLE_APPLICATION_CREDENTIALS, the fake as MLBENCH_GKE_API_ENDPOINT, and nothing of
    this machine's own Google configuration."""
    server = Server(key.public_key(), EMAIL)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    key_file = tmp_path / "key.json"
    key_file.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": EMAIL,
                "client_id": "1",
                "token_uri": server.url + "/token",
            }
        )
    )
    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no user ADC
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # no metadata server probe
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    monkeypatch.setenv(gcloud.API_ENDPOINT_ENV, server.url)
    monkeypatch.setattr(gcloud, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(gcloud, "SAY_EVERY_SECONDS", 0.0)
    server.key_file = key_file
    yield server
    server.close()


def spec(**kw) -> ClusterSpec:
    return gcloud.Gcloud().complete(ClusterSpec(provider="gcloud", name="bench-1", **kw))


def lines() -> tuple[list[str], Callable[[str], None]]:
    said: list[str] = []
    return said, said.append


def create(gke, s: ClusterSpec, ledger: Ledger | None = None):
    ledger = ledger if ledger is not None else Ledger()
    said, say = lines()
    access = gcloud.Gcloud().create(s, ledger, say)
    return access, ledger, said


def posts(gke):
    return [r for r in gke.fake.api_requests() if r.method == "POST"]


# -- complete -------------------------------------------------------------------------


def test_complete_fills_defaults_and_refuses_what_gke_cannot_use():
    s = spec()
    assert (s.zone, s.region, s.machine_type, s.gpu_type, s.disk_gb, s.nodes) == (
        "us-central1-a",
        "",
        "e2-standard-4",
        "",
        50,
        2,
    )
    g = spec(gpus=2)
    assert (g.machine_type, g.gpu_type) == ("n1-standard-4", "nvidia-tesla-t4")
    r = spec(region="europe-west4")
    assert (r.zone, r.region, r.location) == ("", "europe-west4", "europe-west4")
    for kw, option, fix in [
        ({"gpu_type": "nvidia-l4"}, "--gpu-type", "--gpus"),
        ({"zone": "us-central1"}, "zone", "--region"),
        ({"region": "us-central1-a"}, "region", "--zone"),
        ({"zone": "us-central1-a", "region": "us-central1"}, "both", "not both"),
        ({"project": "My Project"}, "project ID", "gcloud projects list"),
        ({"disk_gb": 5}, "--disk-gb", "10 or more"),
    ]:
        with pytest.raises(ClusterError) as err:
            spec(**kw)
        assert option in str(err.value) and fix in err.value.fix, kw


def test_importing_the_module_does_not_import_google():
    code = (
        "import sys, mlbench_worker.client.clusters.gcloud as g; "
        "print(sorted(m for m in sys.modules if m.startswith('google')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_library_names_the_extra(gke, monkeypatch):
    import google.cloud

    monkeypatch.setitem(sys.modules, "google.cloud.container_v1", None)  # as if absent
    monkeypatch.delattr(google.cloud, "container_v1")
    with pytest.raises(ClusterError) as err:
        create(gke, spec())
    assert "mlbench[cloud]" in err.value.fix


# -- create ---------------------------------------------------------------------------


def test_create_sends_one_request_polls_the_operation_and_returns_access(gke):
    s = spec(nodes=3, gpus=1, spot=True, disk_gb=100)
    access, ledger, said = create(gke, s)

    (post,) = posts(gke)
    assert post.path == f"/v1/projects/{PROJECT}/locations/us-central1-a/clusters"
    cluster = post.body["cluster"]
    assert cluster["name"] == "bench-1"
    assert cluster["resourceLabels"] == {"mlbench-cluster": "bench-1"}
    assert "releaseChannel" in cluster and "initialClusterVersion" not in cluster
    (pool,) = cluster["nodePools"]
    assert pool["name"] == "default-pool" and pool["initialNodeCount"] == 3
    config = pool["config"]
    assert config["machineType"] == "n1-standard-4"
    assert config["diskSizeGb"] == 100
    assert config["spot"] is True
    assert config["labels"] == {"mlbench-cluster": "bench-1"}
    assert config["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
    (acc,) = config["accelerators"]
    # The REST transport writes int64 as strings and enums as numbers (LATEST = 3,
    # REGULAR = 2), as proto3 JSON allows and Google accepts.
    assert int(acc["acceleratorCount"]) == 1 and acc["acceleratorType"] == "nvidia-tesla-t4"
    driver = acc["gpuDriverInstallationConfig"]["gpuDriverVersion"]
    assert driver in ("LATEST", container_v1.GPUDriverInstallationConfig.GPUDriverVersion.LATEST)
    channel = cluster["releaseChannel"]["channel"]
    assert channel in ("REGULAR", container_v1.ReleaseChannel.Channel.REGULAR)

    # Every API call carried credentials the fake could verify (a self-signed JWT: the
    # client libraries send those for service accounts rather than exchanging them).
    assert all(gke.fake.authorized(r.authorization) for r in gke.fake.api_requests())

    op_gets = [r for r in gke.fake.api_requests() if "/operations/" in r.path]
    assert len(op_gets) == gke.fake.polls  # polled until DONE, then no more
    assert op_gets[0].path.startswith(f"/v1/projects/{PROJECT}/locations/us-central1-a/operations/")
    assert any("waiting for GKE to create the cluster (usually 5-10 minutes)" in x for x in said)
    assert any("so far" in x for x in said)

    assert access.server == "https://34.118.10.7"
    assert base64.b64decode(access.ca_data) == CA_PEM
    assert ledger.resources == [
        Resource("gke-cluster", "bench-1", {"project": PROJECT, "location": "us-central1-a"})
    ]


def test_regional_cluster_uses_the_region_and_says_nodes_are_per_zone(gke):
    s = spec(region="us-central1", project="other-project-1", kubernetes_version="1.33.5")
    access, ledger, said = create(gke, s)
    (post,) = posts(gke)
    assert post.path == "/v1/projects/other-project-1/locations/us-central1/clusters"
    cluster = post.body["cluster"]
    assert cluster["initialClusterVersion"] == "1.33.5" and "releaseChannel" not in cluster
    assert "accelerators" not in cluster["nodePools"][0]["config"]
    assert cluster["nodePools"][0]["config"]["machineType"] == "e2-standard-4"
    assert cluster["nodePools"][0]["config"].get("spot", False) is False
    assert any("in each of the zones of us-central1" in x for x in said)
    assert ledger.resources[0].detail == {"project": "other-project-1", "location": "us-central1"}
    assert access.server.startswith("https://")


def test_resume_after_interruption_does_not_create_again(gke):
    gke.fake.polls = 4
    ledger = Ledger()

    def interrupt(text: str) -> None:
        if text.startswith("waiting"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gcloud.Gcloud().create(spec(), ledger, interrupt)
    assert [r.id for r in ledger.find("gke-cluster")] == ["bench-1"]  # recorded at once
    assert len(posts(gke)) == 1

    access, _, said = create(gke, spec(), ledger)
    assert len(posts(gke)) == 1  # not made twice
    assert any("not creating it again" in x for x in said)
    assert access.server == "https://34.118.10.7"


def test_a_recorded_cluster_that_is_gone_is_created_again(gke):
    gone = Resource("gke-cluster", "bench-1", {"project": PROJECT, "location": "us-central1-a"})
    access, ledger, said = create(gke, spec(), Ledger([gone]))
    assert len(posts(gke)) == 1 and ledger.resources == [gone]
    assert any("is gone; creating it again" in x for x in said)
    assert access.server == "https://34.118.10.7"


def test_failed_operation_says_why_and_the_ledger_keeps_the_cluster(gke):
    gke.fake.fail_operation = 'Insufficient quota to satisfy request: resource "NVIDIA_T4_GPUS"'
    ledger = Ledger()
    with pytest.raises(ClusterError) as err:
        create(gke, spec(gpus=1), ledger)
    assert "NVIDIA_T4_GPUS" in str(err.value)
    assert "`mlbench cluster delete bench-1` removes what was made" in err.value.fix
    assert "console.cloud.google.com/iam-admin/quotas" in err.value.fix
    assert [r.id for r in ledger.resources] == ["bench-1"]  # it exists (in ERROR): delete it


# -- errors ---------------------------------------------------------------------------


def test_name_taken(gke):
    create(gke, spec())
    ledger = Ledger()  # someone else's: not in this ledger
    with pytest.raises(ClusterError) as err:
        create(gke, spec(), ledger)
    assert "already exists" in str(err.value)
    assert PROJECT in str(err.value) and "us-central1-a" in str(err.value)
    assert "another name" in err.value.fix
    assert ledger.resources == []


@pytest.mark.parametrize("code", [403, 429])
def test_quota(gke, code):
    gke.fake.quota = code
    ledger = Ledger()
    with pytest.raises(ClusterError) as err:
        create(gke, spec(nodes=4), ledger)
    assert "quota" in str(err.value).lower()
    assert "CPUS" in err.value.fix
    assert f"console.cloud.google.com/iam-admin/quotas?project={PROJECT}" in err.value.fix
    assert ledger.resources == [] and len(posts(gke)) == 1  # refused, not retried


def test_unknown_machine_type(gke):
    ledger = Ledger()
    with pytest.raises(ClusterError) as err:
        create(gke, spec(machine_type="e2-standard-999"), ledger)
    assert "e2-standard-999" in str(err.value)
    assert "gcloud compute machine-types list --zones us-central1-a" in err.value.fix
    assert ledger.resources == []


def test_permission_denied(gke):
    gke.fake.denied = True
    with pytest.raises(ClusterError) as err:
        create(gke, spec())
    assert "container.clusters.create" in err.value.fix
    assert "container.googleapis.com" in err.value.fix


def test_missing_credentials(gke, monkeypatch):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    ledger = Ledger()
    with pytest.raises(ClusterError) as err:
        create(gke, spec(), ledger)
    assert "gcloud auth application-default login" in err.value.fix
    assert "GOOGLE_APPLICATION_CREDENTIALS" in err.value.fix
    assert ledger.resources == [] and gke.fake.requests == []


def test_no_project(gke):
    data = json.loads(gke.key_file.read_text())
    del data["project_id"]
    gke.key_file.write_text(json.dumps(data))
    with pytest.raises(ClusterError) as err:
        create(gke, spec())
    assert "no project: pass --project" in str(err.value)
    assert gke.fake.requests == []


# -- delete and token -----------------------------------------------------------------


def test_delete_removes_and_waits(gke):
    _, ledger, _ = create(gke, spec())
    said, say = lines()
    before = len(gke.fake.api_requests())
    removal = gcloud.Gcloud().delete(spec(), ledger, say)
    after = gke.fake.api_requests()[before:]
    assert after[0].method == "DELETE"
    assert after[0].path == f"/v1/projects/{PROJECT}/locations/us-central1-a/clusters/bench-1"
    assert [r.method for r in after[1:]] == ["GET"] * gke.fake.polls
    assert [r.id for r in removal.removed] == ["bench-1"] and removal.failed == []
    assert ledger.resources == [] and gke.fake.clusters == {}
    assert any("waiting for GKE to delete the cluster" in x for x in said)


def test_delete_of_a_missing_cluster_counts_as_removed(gke):
    gone = Resource("gke-cluster", "bench-1", {"project": PROJECT, "location": "us-central1-a"})
    ledger = Ledger([gone])
    removal = gcloud.Gcloud().delete(spec(), ledger, lines()[1])
    assert removal.removed == [gone] and removal.failed == [] and ledger.resources == []


def test_delete_failure_is_reported_not_raised(gke, monkeypatch):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    kept = Resource("gke-cluster", "bench-1", {"project": PROJECT, "location": "us-central1-a"})
    ledger = Ledger([kept])
    removal = gcloud.Gcloud().delete(spec(), ledger, lines()[1])
    assert removal.removed == [] and ledger.resources == [kept]
    ((resource, reason),) = removal.failed
    assert resource == kept and "gcloud auth application-default login" in reason


def test_token_is_the_access_token_the_fake_issued(gke):
    credential = gcloud.Gcloud().token(spec())
    assert credential["kind"] == "ExecCredential"
    assert credential["apiVersion"] == "client.authentication.k8s.io/v1"
    status = credential["status"]
    assert status["token"] in gke.fake.issued
    (exchange,) = [r for r in gke.fake.requests if r.path == "/token"]
    assert exchange.body["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    expiry = datetime.datetime.strptime(status["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    expected = datetime.datetime.fromtimestamp(gke.fake.issued[status["token"]], datetime.UTC)
    # google-auth takes a little off the expiry, to refresh early
    assert abs(expiry.replace(tzinfo=datetime.UTC) - expected) < datetime.timedelta(minutes=5)
