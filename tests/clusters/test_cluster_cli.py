"""`mlbench cluster` as a user types it: a GKE cluster made, listed, resumed, given a token
and deleted through the command line against the local fake of Google's API (fake_gke.py);
an operation that fails leaves a record that says what exists and a delete that removes
it; bad input refused before anything is made; kind's commands and configuration; the
chart values a cluster gets, checked against the chart's schema and rendered by Helm's
own code; the active cluster as the master the other commands talk to."""

from __future__ import annotations

import json
import os
import shutil

import jsonschema  # kubernetes-validate's dependency, which the chart's tests use
import pytest

from mlbench_worker.client import defaults
from mlbench_worker.client.cli import main
from mlbench_worker.client.clusters import install, kind, known_clusters, kubeconfig, prices
from mlbench_worker.client.clusters.spec import ClusterError, ClusterSpec, KubeAccess
from tests.clusters.test_aws import made, server  # noqa: F401 (a fixture)
from tests.clusters.test_gcloud import PROJECT, gke, key  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLBENCH_URL", raising=False)
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    return tmp_path / "home"


@pytest.fixture
def google(gke):  # noqa: F811 (the imported fixture)
    """test_gcloud.py's fake of GKE and the environment of a user of it."""
    return gke


def posts(google) -> list:
    return [r for r in google.fake.api_requests() if r.method == "POST"]


def test_a_gke_cluster_is_made_listed_resumed_given_a_token_and_deleted(google, home, capsys):
    argv = ["cluster", "create", "gcloud", "bench-1", "--nodes", "3", "--no-install"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "waiting for GKE to create the cluster" in out and "kubeconfig" in out
    record = known_clusters.load("bench-1")
    assert record.state == known_clusters.INSTALLING  # made; the chart not installed (--no-install)
    assert record.spec.project == PROJECT  # the credentials' project, recorded
    assert [(r.kind, r.id) for r in record.resources] == [("gke-cluster", "bench-1")]
    # Its own kubeconfig, one context, a token from `mlbench cluster token`.
    config = json.loads(record.kubeconfig.read_text())
    assert config["current-context"] == "mlbench-bench-1"
    assert config["clusters"][0]["cluster"]["server"] == "https://34.118.10.7"
    user = config["users"][0]["user"]["exec"]
    assert user["args"][-3:] == ["cluster", "token", "bench-1"]
    assert oct(record.kubeconfig.stat().st_mode & 0o777) == "0o600"

    assert main(["cluster", "list"]) == 0
    listed = capsys.readouterr().out
    assert "bench-1" in listed and "gcloud" in listed and "us-central1-a" in listed
    assert main(["cluster", "token", "bench-1"]) == 0
    credential = json.loads(capsys.readouterr().out)
    assert credential["kind"] == "ExecCredential"
    assert credential["status"]["token"] in google.fake.issued

    # Run again: resumes with the record's options, no second create at Google.
    assert main(["cluster", "create", "gcloud", "bench-1", "--no-install"]) == 0
    assert "resuming" in capsys.readouterr().out and len(posts(google)) == 1

    assert main(["cluster", "delete", "bench-1"]) == 0
    out = capsys.readouterr().out
    assert "removed gke-cluster bench-1" in out and "everything it recorded is removed" in out
    assert not (home / "clusters" / "bench-1").exists()
    assert [r for r in google.fake.api_requests() if r.method == "DELETE"]


def test_an_eks_cluster_through_the_command_line_leaves_nothing_behind(
    server,  # noqa: F811 (the imported fixture: moto, and boto3 pointed at it)
    home,
    capsys,
):
    argv = ["cluster", "create", "aws", "eks-1", "--spot", "--machine-type", "c5.xlarge"]
    assert main([*argv, "--no-install"]) == 0
    record = known_clusters.load("eks-1")
    kinds = [r.kind for r in record.resources]
    assert kinds[0] == "iam-role" and kinds[-2:] == ["eks-cluster", "eks-nodegroup"]
    assert record.spec.region == "us-east-1" and record.spec.spot
    assert main(["cluster", "token", "eks-1"]) == 0
    token = json.loads(capsys.readouterr().out.splitlines()[-1])["status"]["token"]
    assert token.startswith("k8s-aws-v1.")
    assert main(["cluster", "delete", "eks-1"]) == 0
    assert "everything it recorded is removed" in capsys.readouterr().out
    assert all(not found for found in made("eks-1").values()), made("eks-1")


def test_an_interrupted_create_says_what_exists_and_resumes(google, home, monkeypatch, capsys):
    from mlbench_worker.client.cli import cluster as command

    class Impatient(command.Say):
        """The user presses Ctrl-C while GKE is creating the cluster."""

        def __call__(self, text: str) -> None:
            super().__call__(text)
            if text.startswith("waiting for GKE to create"):
                raise KeyboardInterrupt

    monkeypatch.setattr(command, "Say", Impatient)
    assert main(["cluster", "create", "gcloud", "ctrl-c", "--no-install"]) == 130
    err = capsys.readouterr().err
    assert "the create of ctrl-c interrupted; what exists of it: gke-cluster ctrl-c" in err
    assert "mlbench cluster create gcloud ctrl-c" in err and "mlbench cluster delete ctrl-c" in err
    assert known_clusters.load("ctrl-c").state == known_clusters.CREATING
    monkeypatch.setattr(command, "Say", Impatient.__base__)
    assert main(["cluster", "create", "gcloud", "ctrl-c", "--no-install"]) == 0
    assert len(posts(google)) == 1  # resumed: the cluster Google already had
    assert known_clusters.load("ctrl-c").state == known_clusters.INSTALLING
    assert main(["cluster", "delete", "ctrl-c"]) == 0


def test_a_failed_operation_says_what_exists_and_delete_removes_it(google, home, capsys):
    google.fake.fail_operation = "Insufficient quota in us-central1-a"
    assert main(["cluster", "create", "gcloud", "half", "--no-install"]) == 8
    err = capsys.readouterr().err
    assert "Insufficient quota" in err and "gke-cluster half" in err
    assert "mlbench cluster delete half" in err
    record = known_clusters.load("half")
    assert record.state == known_clusters.FAILED and "Insufficient quota" in record.error
    # A new create of the same name resumes it rather than making a second one.
    assert main(["cluster", "create", "aws", "half"]) == 8
    assert "is a gcloud cluster" in capsys.readouterr().err
    assert main(["cluster", "delete", "half"]) == 0
    assert "removed gke-cluster half" in capsys.readouterr().out
    assert known_clusters.all_records() == []


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["gcloud", "Bench_1"], "cluster name 'Bench_1' is not allowed"),
        (["gcloud", "ok", "--gpu-type", "nvidia-tesla-t4"], "gpu-type"),
        (["kind", "ok", "--machine-type", "m5.xlarge"], "--machine-type has no meaning"),
        (["kind", "ok", "--spot", "--region", "x"], "--region, --spot has no meaning"),
    ],
)
def test_bad_input_is_refused_before_anything_is_made(google, home, capsys, argv, words):
    assert main(["cluster", "create", *argv, "--no-install"]) == 8
    assert words in capsys.readouterr().err
    assert known_clusters.all_records() == [] and posts(google) == []


def test_unknown_clusters_are_named_with_the_known_ones(home, capsys):
    assert main(["cluster", "delete", "nope"]) == 8
    assert "no cluster named 'nope'" in capsys.readouterr().err
    assert main(["cluster", "use", "nope"]) == 8
    assert main(["cluster", "dashboard-url"]) == 8
    assert "no cluster is active" in capsys.readouterr().err


def ready(name: str, url: str, token: str) -> known_clusters.ClusterRecord:
    record = known_clusters.new(ClusterSpec("gcloud", name, machine_type="e2-standard-4",
                                      zone="us-central1-a"))  # fmt: skip
    record.state, record.url, record.token = known_clusters.READY, url, token
    known_clusters.save(record)
    return record


def test_the_active_cluster_is_the_master_the_commands_talk_to(home, monkeypatch, capsys):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "url").write_text("http://127.0.0.1:8000\n")  # an embedded master
    (home / "token").write_text("embedded\n")
    ready("one", "http://34.1.2.3:80", "cluster-token")
    assert defaults.default_url() == "http://127.0.0.1:8000"  # nothing active yet
    assert main(["cluster", "use", "one"]) == 0
    assert (defaults.default_url(), defaults.default_token()) == (
        "http://34.1.2.3:80",
        "cluster-token",
    )
    assert main(["cluster", "dashboard-url"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "http://34.1.2.3:80"
    listed = json.loads((main(["cluster", "list", "--json"]), capsys.readouterr().out)[1])
    assert listed[0]["active"] and "token" not in listed[0] and "password" not in listed[0]
    # MLBENCH_URL wins, and the cluster's token never goes to another address.
    monkeypatch.setenv("MLBENCH_URL", "http://elsewhere:1")
    assert (defaults.default_url(), defaults.default_token()) == ("http://elsewhere:1", "embedded")
    monkeypatch.delenv("MLBENCH_URL")
    assert main(["cluster", "use", "--none"]) == 0
    assert defaults.default_url() == "http://127.0.0.1:8000"
    # A cluster whose create did not end cannot be made active.
    known_clusters.new(ClusterSpec("kind", "unfinished"))
    assert main(["cluster", "use", "unfinished"]) == 8
    assert "finish it with `mlbench cluster create kind unfinished`" in capsys.readouterr().err


def test_a_name_this_client_already_has_is_refused_with_both_ways_out(home):
    ready("taken", "http://x:80", "t")
    with pytest.raises(ClusterError, match="already has a cluster named 'taken'"):
        known_clusters.new(ClusterSpec("aws", "taken"))


# --- kind -------------------------------------------------------------------------------
def test_kinds_commands_and_configuration():
    spec = kind.Kind().complete(ClusterSpec("kind", "local-1", nodes=3))
    assert kind.config(spec)["nodes"] == [{"role": "control-plane"}] + [{"role": "worker"}] * 3
    argv = kind.create_command(spec, "/tmp/kind.json", "/tmp/kubeconfig")
    assert argv[:5] == ["kind", "create", "cluster", "--name", "mlbench-local-1"]
    assert argv[argv.index("--config") + 1] == "/tmp/kind.json" and "--wait" in argv
    assert kind.delete_command(spec) == ["kind", "delete", "cluster", "--name", "mlbench-local-1"]
    versioned = ClusterSpec("kind", "v", kubernetes_version="v1.33.1")
    assert kind.create_command(versioned, "c", "k")[-2:] == ["--image", "kindest/node:v1.33.1"]
    # What `kind get kubeconfig` prints (its shape), read into the cluster's access.
    text = (
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: Q0E=\n"
        "    server: https://127.0.0.1:41234\n  name: kind-mlbench-local-1\nusers:\n"
        "- name: kind-mlbench-local-1\n  user:\n    client-certificate-data: Q0VSVA==\n"
        "    client-key-data: S0VZ\n"
    )
    access = kind.access_from_kubeconfig(text)
    assert access == KubeAccess("https://127.0.0.1:41234", "Q0E=", "Q0VSVA==", "S0VZ")
    written = kubeconfig.document("local-1", "mlbench-local-1", access)
    assert written["users"][0]["user"] == {"client-certificate-data": "Q0VSVA==",
                                           "client-key-data": "S0VZ"}  # fmt: skip


def test_kind_missing_says_how_to_install_it(home, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["cluster", "create", "kind", "k1", "--no-install"]) == 8
    assert "the kind command is not installed" in capsys.readouterr().err
    assert (
        known_clusters.load("k1").state == known_clusters.FAILED
    )  # recorded, so delete can clean up
    assert main(["cluster", "delete", "k1"]) == 0


@pytest.mark.skipif(shutil.which("kind") is None, reason="kind is not installed here")
def test_a_real_kind_cluster_is_made_and_deleted(home):  # pragma: no cover - needs kind
    # Skipped even under CI=true: the issue names kind as absent on these machines, and
    # kind needs a container engine with networking, which these machines do not give.
    assert main(["cluster", "create", "kind", "real-1", "--nodes", "1", "--no-install"]) == 0
    assert main(["cluster", "delete", "real-1"]) == 0


# --- the chart's values -----------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        ClusterSpec("gcloud", "g", nodes=3, machine_type="e2-standard-4", zone="us-central1-a"),
        ClusterSpec(
            "gcloud",
            "s",
            nodes=2,
            machine_type="n1-standard-8",
            gpus=1,
            gpu_type="nvidia-tesla-t4",
            zone="us-central1-a",
            spot=True,
        ),  # fmt: skip
        ClusterSpec("aws", "a", nodes=2, machine_type="g4dn.xlarge", gpus=1, region="us-east-1"),
        ClusterSpec("kind", "k", nodes=2),
    ],
    ids=["gcloud", "gcloud-spot-gpu", "aws-gpu", "kind"],
)
def test_a_clusters_chart_values_fit_the_schema_and_select_its_machines(spec):
    from tests.kubernetes.chart import CHART, find, manifests

    values = install.values_for(spec, registry="registry.example/me", tag="v1")
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(values)  # the draft its $schema names
    objects = manifests(values)
    worker = find(objects, "StatefulSet", "rel-mlbench-worker")
    selector = worker["spec"]["template"]["spec"].get("nodeSelector", {})
    if spec.provider == "kind":
        assert selector == {}
    else:
        assert selector[install.MACHINE_LABEL] == spec.machine_type
        assert ("cloud.google.com/gke-spot" in selector) == spec.spot
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/me/mlbench_worker:v1"
    cpus = prices.machine(spec.provider, spec.machine_type)
    assert values["limits"]["cpu"] == (str(cpus["vcpus"] - 1) if cpus else "1")
    assert values["limits"]["workers"] == spec.nodes and values["limits"]["gpu"] == spec.gpus
    service = find(objects, "Service", "rel-mlbench-master")
    assert service["spec"]["type"] == ("NodePort" if spec.provider == "kind" else "LoadBalancer")


def test_the_dashboards_address_from_the_service_and_nodes():
    lb = {"spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 31000}]}}
    assert install.master_address(lb, []) is None  # no address assigned yet
    lb["status"] = {"loadBalancer": {"ingress": [{"hostname": "a1.elb.amazonaws.com"}]}}
    assert install.master_address(lb, []) == "http://a1.elb.amazonaws.com:80"
    node_port = {"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 31000}]}}
    nodes = [{"status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}}]
    assert install.master_address(node_port, nodes) == "http://172.18.0.2:31000"


def test_helm_is_run_in_the_clusters_own_kubeconfig_and_context(home):
    record = known_clusters.new(ClusterSpec("gcloud", "h1", machine_type="e2-standard-4"))
    argv = install.helm_command(record, install.chart_path(), home / "values.json")
    assert argv[:4] == ["helm", "upgrade", "--install", install.RELEASE]
    assert argv[argv.index("--kubeconfig") + 1] == str(record.kubeconfig)
    assert argv[argv.index("--kube-context") + 1] == "mlbench-h1"
    assert os.path.basename(argv[4]) == "mlbench"


# --- what a hostile or damaged setup must not achieve -------------------------------------
def test_a_clusters_token_never_goes_to_another_address(home, monkeypatch):
    ready("one", "http://34.1.2.3:80", "cluster-token")
    known_clusters.use("one")
    assert defaults.default_token() == "cluster-token"  # its own master
    assert defaults.default_token("http://34.1.2.3:80/") == "cluster-token"
    assert defaults.default_token("http://127.0.0.1:18765") is None  # --url elsewhere
    from mlbench_worker.client.cli.master import Master

    assert Master("http://127.0.0.1:18765", None).client.token is None
    assert Master(None, None).client.token == "cluster-token"


@pytest.mark.parametrize("verb", [["delete"], ["use"], ["dashboard-url"], ["token"]])
def test_names_that_lead_out_of_the_clusters_folder_are_refused(home, capsys, verb):
    victim = home.parent / "victim"
    victim.mkdir(parents=True)
    (victim / "cluster.json").write_text("{}")
    assert main(["cluster", *verb, "../victim"]) == 8
    assert "is not allowed" in capsys.readouterr().err
    assert victim.exists()


def test_a_planted_or_damaged_record_is_refused_and_removes_nothing(home, capsys):
    victim = home.parent / "victim"
    victim.mkdir(parents=True)
    planted = home / "clusters" / "a"
    planted.mkdir(parents=True)
    record = ready("b", "http://x:80", "t").to_json()
    record["spec"]["name"] = "../../victim"
    (planted / "cluster.json").write_text(json.dumps(record))
    assert main(["cluster", "delete", "a"]) == 8
    assert "cannot be read" in capsys.readouterr().err and victim.exists()
    (planted / "cluster.json").write_text("[]")
    assert main(["cluster", "delete", "a"]) == 8
    assert "cannot be read" in capsys.readouterr().err
    (home / "clusters" / "active").write_text("a\n")  # a damaged record made active
    assert defaults.default_url() is None and defaults.default_token() is None
    assert main(["cluster", "list"]) == 0  # the readable ones are listed
    assert "b" in capsys.readouterr().out


def test_a_create_never_resumes_over_a_delete_that_did_not_finish(home, capsys):
    record = known_clusters.new(ClusterSpec("gcloud", "e", machine_type="e2-standard-4"))
    record.state = known_clusters.DELETING
    known_clusters.save(record)
    assert main(["cluster", "create", "gcloud", "e", "--no-install"]) == 8
    assert "finish it with `mlbench cluster delete e`" in capsys.readouterr().err
    assert known_clusters.load("e").state == known_clusters.DELETING


def test_a_record_with_nothing_made_is_deleted_without_asking_its_cluster(home, capsys):
    record = ready("gone", "http://34.9.9.9:80", "t")  # its cluster already gone at Google
    kubeconfig.write(record.kubeconfig, "gone", record.context,
                     KubeAccess("https://10.255.255.1", ""))  # fmt: skip
    assert main(["cluster", "delete", "gone"]) == 0
    assert "everything it recorded is removed" in capsys.readouterr().out
    assert known_clusters.all_records() == []


def test_kind_never_takes_over_a_cluster_it_did_not_make(home, tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "kind").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        'if [ "$1 $2" = "get clusters" ]; then echo mlbench-k; fi\n'
    )
    (fake / "kind").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert main(["cluster", "create", "kind", "k", "--no-install"]) == 8
    assert "kind already has a cluster named mlbench-k" in capsys.readouterr().err
    assert known_clusters.load("k").resources == []
    assert main(["cluster", "delete", "k"]) == 0
    assert "delete" not in calls.read_text()  # the other cluster was never deleted


def test_a_machine_type_the_list_lacks_is_refused_before_a_master_is_needed(home, capsys):
    assert main(["prices", "set-local", "aws", "nope"]) == 2
    assert "aws nope (on-demand) is not in the shipped list" in capsys.readouterr().err
