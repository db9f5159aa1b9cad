"""The helm chart lints strictly, renders with every option, and each object is valid
Kubernetes (strict schemas of 1.29 and 1.33)."""

from __future__ import annotations

import base64
import json

import pytest

from mlbench_master.cluster import kubernetes as k8s
from tests.kubernetes.chart import CHART, NAMESPACE, RELEASE, env_of, find, manifests, render

helm = pytest.importorskip("helm_python")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

KUBE_VERSIONS = ("1.29.0", "1.33.0")

# Each option of values.yaml switched on (one at a time), then all together.
OPTIONS = {
    "defaults": {},
    "maximumWorkers": {"limits": {"maximumWorkers": 3, "cpu": "1500m", "bandwidth": 500}},
    "gcePersistentDisk": {"gcePersistentDisk": {"enabled": True, "pdName": "my-pd-name"}},
    "gcePersistentDisk-readOnly": {
        "gcePersistentDisk": {"enabled": True, "pdName": "my-pd-name", "readOnly": True}
    },
    "weave": {"weave": {"enabled": True}},
    "gpu": {"limits": {"gpu": 1}, "nvidiaDevicePlugin": {"enabled": True}},
    "images": {
        "imagePullSecret": "regcred",
        "master": {
            "image": {"repository": "localhost:5000/mlbench_master", "pullPolicy": "Always"}
        },
        "worker": {
            "image": {"repository": "localhost:5000/mlbench_worker", "tag": "dev"},
            "imagePullSecret": "workercred",
        },
    },
    "externalDatabase": {"externalDatabase": {"url": "postgres://u:p@db.example:5432/mlbench"}},
    "externalDatabase-secret": {"externalDatabase": {"existingSecret": "my-db"}},
    "LoadBalancer": {"master": {"service": {"type": "LoadBalancer"}}},
    "ClusterIP": {"master": {"service": {"type": "ClusterIP"}}},
    "nodePort": {"master": {"service": {"nodePort": 30080}}},
    "externalIPs": {"master": {"service": {"externalIPs": ["203.0.113.7"]}}},
    "second-release": {"master": {"service": {"discoverable": False, "port": 8080}}},
    "containerPort": {"master": {"containerPort": 8000}},
    "replicaCount": {"replicaCount": 1},
    "flinkPython": {"worker": {"flinkPython": "/opt/flink-venv/bin/python"}},
}
OPTIONS["everything"] = {
    **OPTIONS["images"],
    **OPTIONS["gpu"],
    **OPTIONS["weave"],
    **OPTIONS["gcePersistentDisk"],
    **OPTIONS["externalDatabase"],
    "limits": {"maximumWorkers": 4, "cpu": "2", "gpu": 1, "bandwidth": 100},
}


def _worker(objects):
    return find(objects, "StatefulSet", k8s.worker_statefulset_name(RELEASE))


def _master_container(objects, name="web"):
    deployment = find(objects, "Deployment", f"{RELEASE}-mlbench-master")
    spec = deployment["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec["initContainers"] if c["name"] == name)


def test_lints_strictly_with_defaults_and_every_option():
    for label, values in OPTIONS.items():
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        assert not problems, f"{label}: {problems}"


_VALIDATED: set[tuple[str, str]] = set()


@pytest.mark.parametrize("label", sorted(OPTIONS))
def test_every_rendered_object_validates_strictly(label):
    objects = manifests(OPTIONS[label])
    assert objects
    for version in KUBE_VERSIONS:
        for obj in objects:
            key = (json.dumps(obj, sort_keys=True), version)
            if key in _VALIDATED:  # the same object under another option: checked already
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                pytest.fail(
                    f"{label} {obj['kind']}/{obj['metadata']['name']} {version}: "
                    f"{path}: {error.message}"
                )
            _VALIDATED.add(key)


def test_defaults_match_the_seed():
    objects = manifests()
    worker = _worker(objects)
    assert worker["spec"]["replicas"] == 2
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == k8s.WORKER_CONTAINER
    assert container["resources"]["limits"]["cpu"] == "1"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    service = find(objects, "Service", f"{RELEASE}-mlbench-master")
    assert service["spec"]["type"] == "NodePort"
    env = env_of(_master_container(objects))
    assert env["MLBENCH_CLUSTER"] == "kubernetes"
    assert env["MLBENCH_RELEASE_NAME"] == RELEASE
    assert env["MLBENCH_K8S_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["MLBENCH_MAX_WORKERS"] == "2"
    assert env["MLBENCH_MAX_BANDWIDTH"] == "1000"
    assert env["MLBENCH_MASTER_URL"] == f"http://{RELEASE}-mlbench-master.{NAMESPACE}.svc:80"
    # The installation's signing key from the Secret generated at install (docs/publishing.rst).
    secrets = f"{RELEASE}-mlbench-secrets"
    assert env["MLBENCH_SIGNING_KEY"] == {"secretKeyRef": {"name": secrets, "key": "signing-key"}}
    find(objects, "StatefulSet", f"{RELEASE}-mlbench-postgresql")
    find(objects, "Deployment", f"{RELEASE}-mlbench-redis")


def test_the_driver_and_the_chart_agree_on_names_and_labels():
    objects = manifests()
    worker = _worker(objects)
    headless = find(objects, "Service", worker["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    selector = dict(item.split("=") for item in k8s.worker_selector(RELEASE).split(","))
    assert worker["spec"]["selector"]["matchLabels"] == selector
    assert headless["spec"]["selector"] == selector
    template_labels = worker["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    env = env_of(worker["spec"]["template"]["spec"]["containers"][0])
    assert env["MLBENCH_DATA_DIR"] == k8s.DATA_DIR


def test_limits_alias_cpu_and_bandwidth_reach_the_master_and_the_workers():
    objects = manifests(OPTIONS["maximumWorkers"])
    env = env_of(_master_container(objects, "rq-runs"))
    assert env["MLBENCH_MAX_WORKERS"] == "3"  # the tutorial's limits.maximumWorkers
    assert env["MLBENCH_MAX_CPUS"] == "1.5"
    assert env["MLBENCH_MAX_BANDWIDTH"] == "500"
    limits = _worker(objects)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == "1500m"


def test_the_flink_python_reaches_every_master_container_only_when_set():
    """An image built with FLINK names its ranks' Python for the master (MLBENCH_FLINK_PYTHON,
    which launches and probes flink ranks with it); without the value nothing is set and
    a flink run is refused at POST as on an image without it."""
    objects = manifests(OPTIONS["flinkPython"])
    for container in ("web", "rq-runs", "collector"):
        env = env_of(_master_container(objects, container))
        assert env["MLBENCH_FLINK_PYTHON"] == "/opt/flink-venv/bin/python", container
    assert "MLBENCH_FLINK_PYTHON" not in env_of(_master_container(manifests(), "rq-runs"))


def test_gpu_limit_and_device_plugin():
    objects = manifests(OPTIONS["gpu"])
    limits = _worker(objects)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert any(o["kind"] == "DaemonSet" and "nvidia" in o["metadata"]["name"] for o in objects)


def test_persistent_disk_is_mounted_at_datasets_on_workers():
    objects = manifests(OPTIONS["gcePersistentDisk"])
    pv = next(o for o in objects if o["kind"] == "PersistentVolume")
    assert pv["spec"]["gcePersistentDisk"]["pdName"] == "my-pd-name"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    pod = _worker(objects)["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if v["name"] == "datasets")["persistentVolumeClaim"]
    find(objects, "PersistentVolumeClaim", claim["claimName"])
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "datasets")
    assert mount["mountPath"] == "/datasets"


def test_persistent_disk_without_a_name_is_refused_with_the_fix():
    with pytest.raises(helm.HelmError, match="gcePersistentDisk.pdName"):
        render({"gcePersistentDisk": {"enabled": True}})


def test_external_database_replaces_the_bundled_postgresql():
    objects = manifests(OPTIONS["externalDatabase"])
    assert not [o for o in objects if "postgresql" in o["metadata"]["name"]]
    objects = manifests(OPTIONS["externalDatabase-secret"])
    assert not [o for o in objects if "postgresql" in o["metadata"]["name"]]
    env = env_of(_master_container(objects))
    assert env["DATABASE_URL"] == {"secretKeyRef": {"name": "my-db", "key": "DATABASE_URL"}}


def test_image_values_and_pull_secrets():
    objects = manifests(OPTIONS["images"])
    master = find(objects, "Deployment", f"{RELEASE}-mlbench-master")["spec"]["template"]["spec"]
    assert master["imagePullSecrets"] == [{"name": "regcred"}]
    assert master["containers"][0]["image"] == "localhost:5000/mlbench_master:latest"
    assert master["containers"][0]["imagePullPolicy"] == "Always"
    worker = _worker(objects)["spec"]["template"]["spec"]
    assert worker["imagePullSecrets"] == [{"name": "workercred"}]
    assert worker["containers"][0]["image"] == "localhost:5000/mlbench_worker:dev"


def test_secrets_are_generated_at_install_not_stored_in_the_chart():
    first = find(manifests(), "Secret", f"{RELEASE}-mlbench-secrets")["data"]
    second = find(manifests(), "Secret", f"{RELEASE}-mlbench-secrets")["data"]
    for key in ("secret-key", "admin-token", "admin-password", "database-password", "signing-key"):
        assert first[key] and first[key] != second[key]
    # The signing key is one the master reads: an Ed25519 private key in PEM.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    pem = base64.b64decode(first["signing-key"])
    assert isinstance(load_pem_private_key(pem, None), Ed25519PrivateKey)
    ssh = find(manifests(), "Secret", f"{RELEASE}-mlbench-ssh")["data"]
    assert ssh["id_ecdsa"].strip()
    for path in CHART.rglob("*"):
        if path.is_file():
            assert "PRIVATE KEY" not in path.read_text(), path
    # Kept across upgrades: every generated value first looks up the Secret in the cluster.
    text = (CHART / "templates" / "secrets.yaml").read_text()
    assert text.count('lookup "v1" "Secret"') == 2


def test_probes_on_every_long_running_container():
    objects = manifests()
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if container["name"] in ("rq-runs", "collector"):
                continue  # they serve no port; Kubernetes restarts them when they exit
            assert "readinessProbe" in container, (obj["metadata"]["name"], container["name"])
            assert "livenessProbe" in container, (obj["metadata"]["name"], container["name"])
    web = _master_container(objects)
    assert web["readinessProbe"]["httpGet"]["path"] == "/api/health/"


def test_notes_print_the_dashboard_url_commands():
    notes = render()["mlbench/templates/NOTES.txt"]
    assert f"services {RELEASE}-mlbench-master" in notes
    assert "echo http://$NODE_IP:$NODE_PORT" in notes
    notes = render({"master": {"service": {"type": "ClusterIP"}}})["mlbench/templates/NOTES.txt"]
    assert "kubectl port-forward" in notes


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"master": {"service": {"type": "Nodeport"}}}, "/master/service/type"),
        ({"limits": {"cpu": "lots"}}, "/limits/cpu"),
        ({"limits": {"workers": 0}}, "/limits/workers"),
        ({"worker": {"image": {"pullPolicy": "always"}}}, "/worker/image/pullPolicy"),
        ({"externalDatabase": {"url": "mysql://db"}}, "/externalDatabase/url"),
        ({"master": {"containerPort": 0}}, "/master/containerPort"),
        ({"replicaCount": -1}, "/replicaCount"),
        ({"master": {"service": {"externalIPs": "203.0.113.7"}}}, "/master/service/externalIPs"),
        ({"worker": {"flinkPython": "python3"}}, "/worker/flinkPython"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values, where):
    with pytest.raises(helm.HelmError, match=where):
        render(values)


def test_every_variable_the_chart_sets_is_read_by_the_code():
    """No dead configuration: each env name of the master and worker pods is read somewhere."""
    root = CHART.parents[1]
    code = "\n".join(
        p.read_text()
        for pattern in ("mlbench_master/**/*.py", "mlbench_worker/**/*.py", "scripts/k8s/*")
        for p in root.glob(pattern)
        if p.is_file()
    )
    objects = manifests()
    pods = [
        find(objects, "Deployment", f"{RELEASE}-mlbench-master"),
        find(objects, "StatefulSet", k8s.worker_statefulset_name(RELEASE)),
    ]
    names = {
        e["name"]
        for obj in pods
        for c in obj["spec"]["template"]["spec"]["containers"]
        + obj["spec"]["template"]["spec"].get("initContainers", [])
        for e in c.get("env", [])
    }
    assert "DATABASE_URL" in names
    unread = sorted(n for n in names if f'"{n}"' not in code and f"${{{n}" not in code)
    assert not unread, f"set by the chart, read nowhere: {unread}"


def test_the_seed_documents_values_still_work():
    """The values the seed's tutorial and installation guide tell users to set."""
    tutorial = {
        "limits": {"cpu": "1000m", "gpu": 0, "maximumWorkers": 3, "bandwidth": 1000},
        "master": {
            "image": {
                "repository": "gcr.io/p/mlbench_master",
                "tag": "latest",
                "pullPolicy": "Always",
            }
        },
        "worker": {
            "image": {
                "repository": "gcr.io/p/mlbench_worker",
                "tag": "latest",
                "pullPolicy": "Always",
            }
        },
    }
    objects = manifests(tutorial)
    env = env_of(_master_container(objects))
    assert (env["MLBENCH_MAX_WORKERS"], float(env["MLBENCH_MAX_CPUS"])) == ("3", 1.0)
    assert _master_container(objects)["image"] == "gcr.io/p/mlbench_master:latest"
    worker = _worker(objects)["spec"]["template"]["spec"]["containers"][0]
    assert worker["image"] == "gcr.io/p/mlbench_worker:latest"
    assert worker["imagePullPolicy"] == "Always"
    assert worker["resources"]["limits"]["cpu"] == "1000m"

    # The docker-in-docker guide: a pull secret for each component.
    dind = {"master": {"imagePullSecret": "regcred"}, "worker": {"imagePullSecret": "regcred"}}
    objects = manifests(dind)
    master = find(objects, "Deployment", f"{RELEASE}-mlbench-master")["spec"]["template"]["spec"]
    assert master["imagePullSecrets"] == [{"name": "regcred"}]
    assert _worker(objects)["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]

    # The minikube guide: one worker on a one-node cluster (replicaCount), never more than
    # a run may use.
    assert _worker(manifests({"replicaCount": 1}))["spec"]["replicas"] == 1
    assert _worker(manifests({"replicaCount": 5}))["spec"]["replicas"] == 2
    notes = render({"replicaCount": 1})["mlbench/templates/NOTES.txt"]
    assert "Workers: 1 at start" in notes
