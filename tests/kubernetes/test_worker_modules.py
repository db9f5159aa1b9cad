"""KubernetesCluster.has_module: whether the worker image can import an implementation's
framework, asked in a running worker pod (the image decides, not the master), so the API
refuses a run its pods cannot start. tests/images asks a real worker container."""

from __future__ import annotations

import pytest

from mlbench_master.cluster import python_probe
from mlbench_master.cluster.kubernetes import images
from mlbench_master.cluster.kubernetes import pods as worker_pods
from tests.kubernetes.conftest import STS


@pytest.fixture(autouse=True)
def no_remembered_answers(monkeypatch):
    monkeypatch.setattr(worker_pods, "_MODULE_ANSWERS", {})
    monkeypatch.setattr(worker_pods, "_UNANSWERED", {})


def _probes(pods_exec):
    return [(pod, c) for pod, c in pods_exec.calls if python_probe.PROBE in c]


def test_no_running_worker_pod_means_it_cannot_tell(driver, controller, pods_exec):
    controller.create_pods(STS)  # Pending: nothing to ask
    assert driver.has_module("tensorflow") is None
    assert _probes(pods_exec) == []


@pytest.mark.parametrize("code, found", [(0, True), (3, False)])
def test_a_running_pod_is_asked_once_per_image(driver, controller, pods_exec, code, found):
    controller.make_ready(controller.create_pods(STS))
    pods_exec.answers[python_probe.PROBE] = (code, "")
    assert driver.has_module("tensorflow") is found
    assert driver.has_module("tensorflow") is found
    probes = _probes(pods_exec)
    assert len(probes) == 1, probes  # remembered for the image
    pod, command = probes[0]
    assert pod.startswith(STS) and command == ["python", "-c", python_probe.PROBE, "tensorflow"]
    image = controller.statefulset(STS)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert driver.modules_checked_with() == f"python of the worker image {image}"


@pytest.mark.parametrize("answer", [(127, "python: not found"), ConnectionResetError("reset")])
def test_a_probe_that_cannot_answer_is_no_refusal(driver, controller, pods_exec, answer):
    controller.make_ready(controller.create_pods(STS))
    pods_exec.answers[python_probe.PROBE] = answer
    assert driver.has_module("tensorflow") is None
    pods_exec.answers[python_probe.PROBE] = (0, "")
    assert driver.has_module("tensorflow") is None  # not asked again for a while ...
    assert len(_probes(pods_exec)) == 1
    worker_pods._UNANSWERED.clear()  # ... (UNANSWERED_FOR), then asked again
    assert driver.has_module("tensorflow") is True


def test_pods_of_a_runs_custom_image_are_not_asked(driver, controller, pods_exec, emulator):
    controller.make_ready(controller.create_pods(STS))
    sts = controller.statefulset(STS)
    chart_image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
    # A run's custom image on the template (and its pods), the chart's recorded to go back to.
    placed = images.plan(chart_image, {}, "someone/own:1")
    driver._apply(
        {"metadata": {"annotations": placed.annotations},
         "spec": {"template": {"spec": {"containers": [
             {**sts["spec"]["template"]["spec"]["containers"][0], "image": "someone/own:1"}]}}}},
        "test",
    )  # fmt: skip
    for name in [p.name for p in driver.pods()]:
        controller.delete_pod(name)
    controller.make_ready(controller.create_pods(STS))
    assert {p.name for p in driver.pods()} and driver.has_module("tensorflow") is None
    assert _probes(pods_exec) == []
