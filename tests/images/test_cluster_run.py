"""The chart's pods run for real: the master image (web + rq-runs) and two worker
containers, driven by the platform's own Kubernetes driver (cluster.py says what stands in
for the cluster). A 2-worker ResNet-20 run goes through POST /api/runs/ → the master's
RQ job → exec of mpirun in worker 0 → ssh to worker 1 → metrics posted from the ranks to
the master; the master's containers are killed and started again mid-run and re-attach."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest

from tests.images import podnet
from tests.images.apifront import ApiFront
from tests.images.cluster import TOKEN, Api, PodCluster, new_tag, remove_leftovers, ssh_key
from tests.images.engine import SOCKET
from tests.kubernetes.chart import NAMESPACE, find, manifests
from tests.kubernetes.controllers import Controller
from tests.kubernetes.emulator import Emulator
from tests.services import postgres_server, redis_server

# The first test of a session may build the images (minutes on a fresh machine).
pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.timeout(1200)]

COMMAND = (
    "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --max-epochs {epochs}"
    " --train-images 512 --test-images 256 --threads 1 --log-every 1"
)


@pytest.fixture(scope="module")
def pods(images, tmp_path_factory):
    master_image, worker_image = images
    remove_leftovers()
    tag = new_tag()
    folder = tmp_path_factory.mktemp("pods")
    holder_pods = PodCluster(master_image, worker_image, 0, tag, folder / "kube",
                             ssh_key(folder / "ssh"), {})  # fmt: skip
    hosts = holder_pods.hosts(2, "rel-mlbench-worker")
    try:
        holder_pods.control_pid = podnet.make_control(holder_pods.holder, worker_image, hosts)
        with (
            podnet.entered(holder_pods.control_pid),
            postgres_server() as database,
            redis_server() as redis_url,
            Emulator() as emulator,
            ApiFront(emulator.url, os.environ.get("DOCKER_HOST", SOCKET)) as front,
        ):
            holder_pods.kubeconfig.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "pods",
                "clusters": [{"name": "emu", "cluster": {"server": front.url}}],
                "contexts": [{"name": "pods", "context": {"cluster": "emu", "user": "u",
                              "namespace": NAMESPACE}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
            }))  # fmt: skip
            holder_pods.kubeconfig.chmod(0o644)
            rendered = manifests()
            holder_pods.secrets = {
                "database-url": database, "secret-key": "images-test-secret",
                "admin-token": TOKEN, "admin-password": "images-test-password",
                # The chart's own Ed25519 key, as `helm install` generates it.
                "signing-key": base64.b64decode(
                    find(rendered, "Secret", "rel-mlbench-secrets")["data"]["signing-key"]
                ).decode(),
            }  # fmt: skip
            # The chart's Redis is a Service on 6379; the tests' server has a port of its own.
            holder_pods.redis_url = redis_url
            controller = Controller(emulator.client, NAMESPACE)
            controller.create_statefulset(find(rendered, "StatefulSet", "rel-mlbench-worker"))
            holder_pods.start_workers(controller)
            holder_pods.start_master()
            api = Api("http://127.0.0.1:80")
            api.wait_healthy()
            yield holder_pods, api, front
    finally:
        holder_pods.remove()


def test_a_2_worker_run_finishes_in_the_containers_and_survives_a_master_restart(pods):
    cluster, api, front = pods
    response = api.post("/api/runs/", {
        "name": "images", "num_workers": 2, "num_cpus": 1, "run_all_nodes": True,
        "custom_image_command": COMMAND.format(epochs=3), "time_limit": 600,
        "test_examples": 256,
    })  # fmt: skip
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    # Ranks in both containers: mpirun in worker 0 reached worker 1 over ssh.
    deadline = time.monotonic() + 180
    while not (cluster.rank_processes(0) and cluster.rank_processes(1)):
        assert api.get(f"/api/runs/{run_id}/").json()["state"] not in ("FAILED", "CANCELLED")
        assert time.monotonic() < deadline, "the ranks never ran in both worker containers"
        time.sleep(0.5)
    assert any(pod == "rel-mlbench-worker-0" for pod, _ in front.execs)
    cluster.kill_master()
    cluster.start_master()
    api.wait_healthy()
    done = api.wait(run_id, ("FINISHED", "FAILED", "CANCELLED"), limit=400)
    assert done["state"] == "FINISHED", done.get("reason")
    metrics = api.get(f"/api/metrics/{run_id}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_accuracy", "epoch"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"
    assert max(int(float(m["value"])) for m in metrics["epoch"]) >= 2
    # mpirun's output, followed through the restart: every epoch's validation line (some
    # written while no master watched), attributed to rank 0, each stored once.
    chunks = api.logs(run_id)
    assert 0 in {c["rank"] for c in chunks}
    validations = [line for c in chunks for line in c["text"].splitlines() if "val_acc" in line]
    assert len(validations) == 3, validations
    assert cluster.rank_processes(0) == [] and cluster.rank_processes(1) == []


def test_cancel_leaves_no_rank_in_any_container(pods):
    cluster, api, _ = pods
    response = api.post("/api/runs/", {
        "name": "images-cancel", "num_workers": 2, "num_cpus": 1, "run_all_nodes": True,
        "custom_image_command": COMMAND.format(epochs=50), "time_limit": 600,
        "test_examples": 256,
    })  # fmt: skip
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    deadline = time.monotonic() + 180
    while not (cluster.rank_processes(0) and cluster.rank_processes(1)):
        assert time.monotonic() < deadline, "the ranks never ran in both worker containers"
        time.sleep(0.5)
    cancelled = api.post(f"/runs/{run_id}/cancel/", {})  # the dashboard's Cancel
    assert cancelled.status_code == 200, cancelled.text
    deadline = time.monotonic() + 60
    while cluster.rank_processes(0) or cluster.rank_processes(1):
        assert time.monotonic() < deadline, (
            f"left running: {cluster.rank_processes(0)} {cluster.rank_processes(1)}"
        )
        time.sleep(0.5)
    assert api.get(f"/api/runs/{run_id}/").json()["state"] == "CANCELLED"


def test_an_implementation_the_worker_image_lacks_is_refused_naming_it(pods):
    """The worker image has no TensorFlow: the master asks a worker container (pod exec,
    the probe the other drivers run) and refuses a tensorflow run before storing it."""
    _, api, front = pods
    served = api.get("/api/runs/defaults/").json()["implementations"]
    assert served["tensorflow"]["available"] is False, served["tensorflow"]
    assert "mlbench[tensorflow]" in served["tensorflow"]["install"]
    assert served["torch-ddp"]["available"] is True and served["reference"]["available"] is True
    assert any("find_spec" in " ".join(command) for _, command in front.execs), front.execs
    before = api.get("/api/runs/").json()
    response = api.post("/api/runs/", {
        "name": "images-tf", "num_workers": 2, "num_cpus": 1, "implementation": "tensorflow",
    })  # fmt: skip
    assert response.status_code == 400, response.text
    words = " ".join(response.json()["errors"]["implementation"])
    assert "needs tensorflow, which the workers' Python cannot import" in words
    assert "worker image" in words and "choose one of reference, torch-ddp" in words
    assert api.get("/api/runs/").json() == before
