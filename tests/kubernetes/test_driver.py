"""KubernetesCluster against an in-memory Kubernetes API over HTTP (kmock's emulator).

The emulator runs no controllers: the tests create the worker pods and flip their status
as the StatefulSet controller and the kubelet would. Exec (mpirun, tc, pkill) goes through
the driver's channel seam; see conftest.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from mlbench_master.cluster.base import ClusterError, PodInfo, PrepareTimeout
from mlbench_master.cluster.kubernetes import KubernetesCluster, shell
from mlbench_master.cluster.kubernetes.podexec import exit_status
from tests.kubernetes.chart import NAMESPACE, RELEASE
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.emulator import Emulator, wait_for


def _worker_container(controller):
    containers = controller.statefulset(STS)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "worker")


def _prepare_in_background(driver, run):
    result = {}

    def target():
        try:
            result["hosts"] = driver.prepare(run)
        except Exception as error:  # handed to the test thread
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def test_pods_lists_this_releases_workers_in_the_seed_shape(driver, controller):
    names = controller.create_pods(STS)
    controller.make_ready(names)
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"app": "mlbench", "component": "postgresql"}},
        "spec": {"containers": [{"name": "db", "image": "postgres"}]},
    }
    controller.core.create_namespaced_pod(NAMESPACE, other)
    pods = driver.pods()
    assert [p.name for p in pods] == [f"{STS}-0", f"{STS}-1"]
    first = pods[0]
    assert isinstance(first, PodInfo)
    assert first.phase == "Running" and first.ip == "10.0.0.10" and first.node == "node-a"
    assert {
        "app": "mlbench",
        "component": "worker",
        "release": RELEASE,
    }.items() <= first.labels.items()


def test_prepare_scales_patches_limits_and_waits_for_ready_pods(driver, controller):
    run = Run(num_workers=3, num_cpus=2.5)
    thread, result = _prepare_in_background(driver, run)
    wait_for(lambda: controller.statefulset(STS)["spec"]["replicas"] == 3, "the scale-up")
    container = _worker_container(controller)
    assert container["resources"]["limits"]["cpu"] == "2500m"
    assert container["resources"]["requests"]["cpu"] == "2500m"
    assert container["resources"]["limits"]["memory"] == "4Gi"  # the chart's, kept
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["ports"][0]["containerPort"] == 22  # the rest of the container kept
    assert container["image"].endswith("mlbench_worker:latest")

    names = controller.create_pods(STS)  # pods from the patched template, Pending
    time.sleep(0.2)
    assert thread.is_alive(), "prepare() returned before the pods were Ready"
    controller.make_ready(names)
    thread.join(10)
    assert "error" not in result, result.get("error")
    assert result["hosts"] == [f"{STS}-{i}.{STS}.{NAMESPACE}.svc" for i in range(3)]


def test_prepare_sets_a_gpu_limit_when_asked(driver, controller, monkeypatch):
    from django.conf import settings

    monkeypatch.setattr(settings, "MLBENCH_MAX_GPUS", 2, raising=False)
    thread, result = _prepare_in_background(driver, Run(num_workers=1, gpu_enabled=True))
    wait_for(
        lambda: "nvidia.com/gpu" in _worker_container(controller)["resources"]["limits"], "gpu"
    )
    assert _worker_container(controller)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    controller.make_ready(controller.create_pods(STS))
    thread.join(10)
    assert result["hosts"] == [f"{STS}-0.{STS}.{NAMESPACE}.svc"]


def test_prepare_keeps_an_equal_cpu_quantity_in_its_notation(driver, controller, emulator):
    sts = controller.statefulset(STS)
    containers = sts["spec"]["template"]["spec"]["containers"]
    containers[0]["resources"]["limits"]["cpu"] = "1000m"  # as a user may write limits.cpu
    containers[0]["resources"]["requests"]["cpu"] = "1000m"
    controller.apps.patch_namespaced_stateful_set(
        STS, NAMESPACE, {"spec": {"template": {"spec": {"containers": containers}}}}
    )
    controller.make_ready(controller.create_pods(STS))
    patches = len([r for r in emulator.requests() if r.method == "PATCH"])
    assert len(driver.prepare(Run(num_workers=2, num_cpus=1))) == 2  # 1 CPU == "1000m"
    assert len([r for r in emulator.requests() if r.method == "PATCH"]) == patches


def test_prepare_does_not_patch_what_already_matches(driver, controller, emulator):
    controller.make_ready(controller.create_pods(STS))  # 2 workers, 1 CPU: the chart's defaults
    assert len(driver.prepare(Run(num_workers=2, num_cpus=1))) == 2
    assert not [
        r for r in emulator.requests() if r.method == "PATCH" and "statefulsets" in str(r.url)
    ]


def test_prepare_timeout_names_the_pod_and_its_latest_event(driver, controller):
    names = controller.create_pods(STS)
    controller.make_ready(names[:1])
    controller.add_event(names[1], "Pod", "pulling image", "2026-01-01T00:00:00Z", "Pulling")
    controller.add_event(
        names[1], "Pod", "0/3 nodes are available: 3 Insufficient cpu.", "2026-01-01T00:05:00Z"
    )
    controller.add_event(names[0], "Pod", "unrelated", "2026-01-01T00:09:00Z")
    driver.ready_timeout = 0.3
    with pytest.raises(PrepareTimeout) as caught:
        driver.prepare(Run(num_workers=2))
    assert str(caught.value) == (
        f"workers not Ready after 0.3 s: {STS}-1 Pending: 0/3 nodes are available: 3 Insufficient cpu."
    )
    assert isinstance(caught.value, ClusterError)


def test_prepare_timeout_for_a_pod_never_created_names_the_statefulset_event(driver, controller):
    controller.make_ready(controller.create_pods(STS, count=1))
    controller.add_event(
        STS, "StatefulSet", f"create Pod {STS}-1 failed: exceeded quota", "2026-01-01T00:00:00Z"
    )
    driver.ready_timeout = 0.2
    with pytest.raises(
        PrepareTimeout, match=f"{STS}-1 not created: create Pod {STS}-1 failed: exceeded quota"
    ):
        driver.prepare(Run(num_workers=2))


def test_prepare_waits_for_pods_with_the_new_limits(driver, controller):
    controller.make_ready(controller.create_pods(STS))  # Ready, but with 1 CPU
    driver.ready_timeout = 0.3
    with pytest.raises(PrepareTimeout, match="previous limits"):
        driver.prepare(Run(num_workers=2, num_cpus=2))


def test_prepare_without_the_statefulset_says_what_to_check(emulator, pods_exec):
    driver = KubernetesCluster(
        api_client=emulator.client, namespace="elsewhere", release=RELEASE, open_channel=pods_exec
    )
    with pytest.raises(ClusterError, match="MLBENCH_RELEASE_NAME") as caught:
        driver.prepare(Run())
    assert "elsewhere" in str(caught.value) and STS in str(caught.value)


def test_prepare_refuses_zero_workers(driver, controller):
    with pytest.raises(ClusterError, match="num_workers"):
        driver.prepare(Run(num_workers=0))


def test_launch_streams_mpirun_output_and_exit_code_and_limits_bandwidth(
    driver, controller, pods_exec
):
    controller.make_ready(controller.create_pods(STS))
    run = Run(num_workers=2, max_bandwidth=100)
    argv = [
        "sh",
        "-c",
        "echo '[1,0]<stdout>: epoch 1'; echo '[1,1]<stderr>: warning' >&2; "
        'echo "token=$MLBENCH_RUN_TOKEN data=$MLBENCH_DATA_DIR"; printf partial; exit 3',
    ]
    execution = driver.launch(run, argv, {"MLBENCH_RUN_TOKEN": "s3cret", "MLBENCH_DATA_DIR": "/x"})
    lines = []
    deadline = time.monotonic() + 10
    while execution.poll() is None and time.monotonic() < deadline:
        lines += execution.read(0.2)
    assert execution.poll() == 3
    texts = {(line.rank, line.stream, line.text) for line in lines}
    assert (0, "stdout", "epoch 1") in texts
    assert (1, "stderr", "warning") in texts
    assert (None, "stdout", "token=s3cret data=/datasets") in texts
    assert (None, "stdout", "partial") in texts

    first, second = f"{STS}-0", f"{STS}-1"
    launches = [c for p, c in pods_exec.calls if "mlbench-launch" in c]
    assert len(launches) == 1 and pods_exec.calls[2][0] == first
    assert "s3cret" not in " ".join(launches[0])  # the token travels over stdin, not the URL
    for pod in (first, second):
        scripts = pods_exec.scripts(pod)
        limit = next(s for s in scripts if "htb rate 100mbit ceil 100mbit" in s)
        assert "match ip dst 127.0.0.1/32 flowid 1:10" in limit  # the master is not limited
        assert scripts[-1] == " ".join(shell.clear_bandwidth())  # removed after the run


def test_launch_without_a_bandwidth_limit_clears_old_ones(driver, controller, pods_exec):
    controller.make_ready(controller.create_pods(STS))
    execution = driver.launch(Run(num_workers=2), ["true"], {})
    while execution.poll() is None:
        execution.read(0.2)
    assert execution.poll() == 0
    assert pods_exec.scripts(f"{STS}-1") == [" ".join(shell.clear_bandwidth())]
    assert not [s for s in pods_exec.scripts() if "htb" in s]


def test_launch_fails_clearly_when_tc_cannot_limit(driver, controller, pods_exec):
    controller.make_ready(controller.create_pods(STS))
    pods_exec.answers["htb"] = (2, "RTNETLINK answers: Operation not permitted")
    with pytest.raises(
        ClusterError, match=f"bandwidth limit of 50 mbit/s in pod {STS}-0.*not permitted"
    ):
        driver.launch(Run(num_workers=2, max_bandwidth=50), ["true"], {})
    assert not [c for _, c in pods_exec.calls if "mlbench-launch" in c]


def test_launch_before_prepare_is_refused(driver, controller):
    with pytest.raises(ClusterError, match=f"3 workers wanted, {STS}-0, {STS}-1, {STS}-2 missing"):
        driver.launch(Run(num_workers=3), ["true"], {})


def test_cancel_stops_the_run_in_every_running_pod(driver, controller, pods_exec):
    names = controller.create_pods(STS, count=3)
    controller.make_ready(names[:2])  # the third is Pending: nothing can run there
    driver.cancel(Run())
    stop = " ".join(shell.stop_run())
    assert [(p, " ".join(c)) for p, c in pods_exec.calls] == [(names[0], stop), (names[1], stop)]


def test_cancel_reports_processes_that_survive(driver, controller, pods_exec):
    controller.make_ready(controller.create_pods(STS))
    pods_exec.answers["signal KILL"] = (1, "")
    with pytest.raises(ClusterError, match=f"may survive in {STS}-0"):
        driver.cancel(Run())


def test_killing_an_execution_cancels_the_run(driver, controller, pods_exec):
    controller.make_ready(controller.create_pods(STS))
    execution = driver.launch(Run(num_workers=2), ["sleep", "30"], {})
    execution.kill()
    assert execution.poll() == 137
    assert sum(" ".join(shell.stop_run()) == s for s in pods_exec.scripts()) == 2


def test_is_running_asks_the_pods(driver, controller, pods_exec):
    controller.make_ready(controller.create_pods(STS))
    pods_exec.answers["alive >/dev/null"] = (1, "")
    assert driver.is_running(Run()) is False
    pods_exec.answers["alive >/dev/null"] = (0, "")
    assert driver.is_running(Run()) is True
    pods_exec.answers["alive >/dev/null"] = ClusterError("cannot exec in pod: gone")
    assert driver.is_running(Run()) is False


def test_pod_metrics_without_metrics_server_are_empty_and_said_once(
    driver, controller, caplog, emulator, pods_exec, pod_state
):
    controller.make_ready(controller.create_pods(STS))
    # The collector makes a new driver every round: said once for them all.
    again = KubernetesCluster(api_client=emulator.client, namespace=NAMESPACE, release=RELEASE,
                              open_channel=pods_exec, master_url="http://127.0.0.1:8000",
                              state_dir=str(pod_state))  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert driver.samples(None) == []
        assert driver.samples(None) == []
        assert again.samples(None) == []
    assert driver.metrics_available is False
    said = [r for r in caplog.records if "no resource metrics" in r.getMessage()]
    assert len(said) == 1


def test_pod_metrics_from_the_metrics_api(pods_exec, worker_manifest):
    from kubernetes import client

    active = Run(id=12, num_workers=1)  # the collector passes the run in progress

    with Emulator(metrics_api=True) as api:
        driver = KubernetesCluster(
            api_client=api.client, namespace=NAMESPACE, release=RELEASE, open_channel=pods_exec
        )
        pods_exec.answers["/proc/net/dev"] = (0, "1000 2000\n")
        labels = worker_manifest["spec"]["template"]["metadata"]["labels"]
        client.CustomObjectsApi(api.client).create_namespaced_custom_object(
            "metrics.k8s.io",
            "v1beta1",
            NAMESPACE,
            "pods",
            {
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "PodMetrics",
                "metadata": {"name": f"{STS}-0", "namespace": NAMESPACE, "labels": labels},
                "timestamp": "2026-01-01T00:00:00Z",
                "window": "15s",
                "containers": [{"name": "worker", "usage": {"cpu": "250m", "memory": "64Mi"}}],
            },
        )
        samples = {(s.pod_name, s.name): s for s in driver.samples(active)}
    assert driver.metrics_available is True
    assert samples[(f"{STS}-0", "cpu_cores")].value == pytest.approx(0.25)
    assert samples[(f"{STS}-0", "memory_bytes")].value == 64 * 1024 * 1024
    assert samples[(f"{STS}-0", "net_rx_bytes")].value == 1000
    assert samples[(f"{STS}-0", "net_tx_bytes")].cumulative is True
    assert samples[(f"{STS}-0", "cpu_cores")].metadata == {"run_id": active.id, "rank": 0}


@pytest.mark.parametrize(
    "record",
    [{}, {"kubernetes": {"pods": [f"{STS}-0"], "launcher": f"{STS}-0"}}],
    ids=["no-launch", "launched-by-an-older-master"],
)
def test_a_launch_without_files_in_a_pod_cannot_be_reattached(driver, controller, record):
    from mlbench_master.cluster.base import CannotAttach

    controller.make_ready(controller.create_pods(STS))
    with pytest.raises(CannotAttach, match="names no output files in a pod"):
        driver.attach(Run(launch=record))


def test_namespace_and_release_come_from_settings_never_a_default(monkeypatch, tmp_path):
    monkeypatch.delenv("MLBENCH_K8S_NAMESPACE", raising=False)
    monkeypatch.delenv("MLBENCH_RELEASE_NAME", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    from django.conf import settings

    for name in ("MLBENCH_K8S_NAMESPACE", "MLBENCH_RELEASE_NAME"):
        monkeypatch.setattr(settings, name, None, raising=False)
    driver = KubernetesCluster()
    with pytest.raises(ClusterError, match="set MLBENCH_K8S_NAMESPACE"):
        _ = driver.namespace
    with pytest.raises(ClusterError, match="set MLBENCH_RELEASE_NAME"):
        _ = driver.release
    with pytest.raises(ClusterError, match="KUBECONFIG"):
        _ = driver.api_client


def test_kubeconfig_and_environment_configure_the_driver(
    emulator, controller, monkeypatch, tmp_path
):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: emu, cluster: {{server: '{emulator.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: test, context: {cluster: emu, user: u}}]\n"
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("MLBENCH_K8S_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("MLBENCH_RELEASE_NAME", RELEASE)
    from django.conf import settings

    for name in ("MLBENCH_K8S_NAMESPACE", "MLBENCH_RELEASE_NAME"):
        monkeypatch.setattr(settings, name, None, raising=False)
    controller.create_pods(STS, count=1)
    assert [p.name for p in KubernetesCluster().pods()] == [f"{STS}-0"]


def test_exec_status_channel_is_read_like_the_api_server_writes_it():
    assert exit_status('{"metadata":{},"status":"Success"}') == (0, "")
    failure = (
        '{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code",'
        '"reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"137"}]}}'
    )
    assert exit_status(failure) == (137, "")
    code, reason = exit_status(
        '{"status":"Failure","message":"container not found (\\"worker\\")"}'
    )
    assert code == 255 and "container not found" in reason
    assert exit_status("")[0] == 255


def test_shell_helpers_work_in_a_real_shell():
    import subprocess

    block = shell.environment_block({"A": "x y", "B": "it's=ok"})
    assert block == "A=x y\nB=it's=ok\n\n"
    with pytest.raises(ValueError, match="cannot be passed"):
        shell.environment_block({"A": "two\nlines"})
    out = subprocess.run(shell.network_counters(), capture_output=True, text=True, check=True)
    rx, tx = (int(v) for v in out.stdout.split())
    assert rx >= 0 and tx >= 0
