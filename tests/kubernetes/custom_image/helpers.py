"""What the custom-image tests share: the images, the exec seam that notes the image a
pod runs (`PodShell`), a driver as one master process has it, runs, and the checks that the
chart's image is back."""

from __future__ import annotations

import time
from typing import Any

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.kubernetes import KubernetesCluster, detach
from mlbench_master.cluster.kubernetes.names import (
    CUSTOM_IMAGE_ANNOTATION,
    ORIGINAL_IMAGE_ANNOTATION,
)
from mlbench_master.cluster.mpirun import mpirun_argv
from tests.kubernetes.chart import NAMESPACE, RELEASE
from tests.kubernetes.conftest import (
    LOCAL_SCRIPTS,
    STS,
    CannedChannel,
    Run,
    local_channel,
    script_name,
)
from tests.kubernetes.emulator import wait_for

CUSTOM = "registry.example/team/resnet-variant:1"
BROKEN = "registry.example/team/never-pushed:1"
NO_SSHD = "docker.io/library/python:3.11-slim"
BAD_NAME = "registry.example/Team/Upper-Case:1"
COMMAND = "python /app/train.py --epochs 1"


class PodShell:
    """The driver's exec seam: answers as worker pods would, and records for every command
    the pod, the image that pod runs at that moment, and the command. The launch's scripts
    run for real here (tests/kubernetes/conftest.py), with a stand-in for mpirun: it
    writes `output` and exits with `launch_code`, or runs until it is killed (None)."""

    def __init__(self, api_client: Any, state_dir: str) -> None:
        from kubernetes import client

        self._client = client.ApiClient(api_client.configuration)
        self._core = client.CoreV1Api(self._client)
        self.state_dir = state_dir
        self.calls: list[tuple[str, str, list[str]]] = []
        self.launch_code: int | None = 0
        self.output = "[1,0]<stdout>: done\n"
        self.custom_program: list[str] | None = None

    def program(self) -> list[str]:
        if self.custom_program is not None:
            return self.custom_program
        if self.launch_code is None:
            return ["sleep", "60"]
        script = 'printf "%s" "$1"; exit "$2"'
        return ["sh", "-c", script, "fake-mpirun", self.output, str(self.launch_code)]

    def __call__(self, pod: str, command: list[str], *, binary: bool = False):
        from kubernetes.client.exceptions import ApiException

        try:
            spec = self._core.read_namespaced_pod(pod, NAMESPACE).spec
        except ApiException as error:  # as the real channel says it of a pod that is gone
            raise ClusterError(f"cannot exec in pod {pod}: {error.reason}") from error
        image = next(c.image for c in spec.containers if c.name == "worker")
        self.calls.append((pod, image, command))
        if script_name(command) in LOCAL_SCRIPTS:
            return local_channel(command, binary, self.program())
        return CannedChannel(0, "")

    def launches(self) -> list[tuple[str, str, list[str]]]:
        return [call for call in self.calls if script_name(call[2]) == detach.LAUNCH]

    def close(self) -> None:
        self._client.close()


# The ready timeout of the tests whose pods never get Ready: the driver waits it out, then
# names the pod it waited for. It must leave the emulated controller (a thread making a few
# HTTP calls a step) time to play the pods' failure first: 1 s did not on a machine loaded
# 5-15, which named a pod not yet pulled instead.
PULL_WAIT = 4


# The ready timeout of every other test: their pods get Ready, and the driver returns as soon
# as they are, so this only bounds a hang. 10 s was too short for the emulated controller to
# roll two pods to a new image on a machine loaded 8 (test_master_died: "worker-0 Pending").
READY_WAIT = 60


def driver_for(emulator, shell, ready_timeout: float = READY_WAIT) -> KubernetesCluster:
    """A driver as one process of the master has it (a new one stands for another process)."""
    return KubernetesCluster(
        api_client=emulator.client,
        namespace=NAMESPACE,
        release=RELEASE,
        ready_timeout=ready_timeout,
        poll_interval=0.02,
        open_channel=shell,
        master_url="http://127.0.0.1:8000",
        state_dir=shell.state_dir,
    )


def template_of(rollout) -> tuple[str, dict[str, str]]:
    sts = rollout.apps.read_namespaced_stateful_set(STS, NAMESPACE)
    image = next(c.image for c in sts.spec.template.spec.containers if c.name == "worker")
    return image, dict(sts.metadata.annotations or {})


def assert_restored(rollout, chart_image: str) -> None:
    image, annotations = template_of(rollout)
    assert image == chart_image
    assert ORIGINAL_IMAGE_ANNOTATION not in annotations
    assert CUSTOM_IMAGE_ANNOTATION not in annotations
    wait_for(
        lambda: rollout.settled(chart_image), "the pods back on the chart's image" + rollout.stopped
    )


def run_to_end(execution) -> int:
    deadline = time.monotonic() + 10
    while execution.poll() is None:
        assert time.monotonic() < deadline, "the launch did not end"
        execution.read(0.05)
    code = execution.poll()
    execution.kill()  # as the run job does after every launch
    return code


def custom_run(**fields) -> Any:
    fields.setdefault("num_workers", 2)
    fields.setdefault("custom_image_name", CUSTOM)
    fields.setdefault("custom_image_command", COMMAND)
    return Run(**fields)


def launch_and_die(emulator, shell, run) -> dict[str, Any]:
    """Prepare and launch with one master process that then dies: nothing is cleaned up,
    only the launch record (stored with the run by the job) and the cluster remain."""
    driver = driver_for(emulator, shell)
    shell.launch_code = None
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    return execution.record


def stored_run(**fields):
    from mlbench_master.api.models import Run as RunRow

    fields.setdefault("name", "open division")
    fields.setdefault("num_workers", 2)
    fields.setdefault("max_bandwidth", 0)
    fields.setdefault("custom_image_name", CUSTOM)
    fields.setdefault("custom_image_command", COMMAND)
    return RunRow.objects.create(**fields)


def started_run_whose_master_died(emulator, shell, program: list[str] | None = None):
    """A stored run, STARTED and launched by a master process that then died."""
    from mlbench_master.runs import lifecycle

    run = stored_run()
    shell.custom_program = program
    record = launch_and_die(emulator, shell, lifecycle.run_spec(run))
    assert lifecycle.mark_started(run)
    lifecycle.record_launch(run, record)
    return run
