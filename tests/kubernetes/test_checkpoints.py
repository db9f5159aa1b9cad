"""Checkpoints on Kubernetes: where a run's go (the data sets' disk only when it is
persistent and writable, else the pods' "state" emptyDir) and how deleting a run removes
them in pod 0."""

from __future__ import annotations

import pytest

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.kubernetes import KubernetesCluster, checkpoints
from mlbench_master.cluster.kubernetes.names import STATE_DIR
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.conftest import STS
from tests.kubernetes.controllers import Controller
from tests.kubernetes.emulator import Emulator


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({}, f"{STATE_DIR}/checkpoints/run-7"),
        (
            {"gcePersistentDisk": {"enabled": True, "pdName": "pd"}},
            "/datasets/checkpoints/run-7",
        ),
        (
            {"gcePersistentDisk": {"enabled": True, "pdName": "pd", "readOnly": True}},
            f"{STATE_DIR}/checkpoints/run-7",
        ),
    ],
    ids=["emptyDir", "persistent-disk", "read-only-disk"],
)
def test_checkpoints_go_to_the_data_sets_disk_only_when_it_is_persistent_and_writable(
    values, where, pods_exec
):
    manifest = find(manifests(values), "StatefulSet", STS)
    assert checkpoints.directory(manifest, 7) == where
    with Emulator() as api:
        Controller(api.client, NAMESPACE).create_statefulset(manifest)
        driver = KubernetesCluster(
            api_client=api.client, namespace=NAMESPACE, release=RELEASE, open_channel=pods_exec
        )
        assert driver.checkpoint_dir(7) == where


def test_deleting_a_run_removes_its_checkpoints_in_pod_0(driver, controller, pods_exec):
    names = controller.create_pods(STS)
    driver.delete_checkpoints(7)  # no pod 0 running: an emptyDir's went with its pod
    assert pods_exec.calls == []
    controller.make_ready(names)
    driver.delete_checkpoints(7)
    [(pod, command)] = pods_exec.calls
    assert pod == f"{STS}-0" and command[-1] == f"{driver.state_dir}/checkpoints/run-7"
    pods_exec.answers["mlbench-remove"] = (1, "rm: cannot remove: Read-only file system")
    with pytest.raises(ClusterError, match="Read-only file system"):
        driver.delete_checkpoints(7)


def test_checkpoints_on_a_disk_no_pod_reaches_are_said_to_stay(pods_exec):
    manifest = find(
        manifests({"gcePersistentDisk": {"enabled": True, "pdName": "pd"}}), "StatefulSet", STS
    )
    with Emulator() as api:
        Controller(api.client, NAMESPACE).create_statefulset(manifest)
        driver = KubernetesCluster(
            api_client=api.client, namespace=NAMESPACE, release=RELEASE, open_channel=pods_exec
        )
        with pytest.raises(ClusterError, match="/datasets/checkpoints/run-7 stays on the"):
            driver.delete_checkpoints(7)


def test_the_chart_mounts_the_state_emptydir_where_the_driver_expects_it(worker_manifest):
    spec = worker_manifest["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == STATE_DIR)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume == {"name": mount["name"], "emptyDir": {}}
    assert not mount.get("readOnly")
