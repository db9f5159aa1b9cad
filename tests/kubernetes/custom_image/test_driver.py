"""The driver alone: prepare rolls the workers onto the run's image, the command runs in it,
and every way a launch ends (or an image fails) puts the chart's image back."""

from __future__ import annotations

import shlex
import threading
import time

import pytest

from mlbench_master.cluster.base import ClusterError, PrepareTimeout
from mlbench_master.cluster.kubernetes.names import (
    CUSTOM_IMAGE_ANNOTATION,
    ORIGINAL_IMAGE_ANNOTATION,
)
from mlbench_master.cluster.mpirun import mpirun_argv
from tests.kubernetes.chart import NAMESPACE
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.custom_image.helpers import (
    BAD_NAME,
    BROKEN,
    COMMAND,
    CUSTOM,
    NO_SSHD,
    PULL_WAIT,
    assert_restored,
    custom_run,
    driver_for,
    run_to_end,
    template_of,
)
from tests.kubernetes.emulator import wait_for


def test_prepare_rolls_every_worker_onto_the_run_image_and_records_the_chart_image(
    emulator, rollout, shell, chart_image
):
    driver = driver_for(emulator, shell)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    hosts = driver.prepare(custom_run(num_workers=3))
    assert hosts == [f"{STS}-{i}.{STS}.{NAMESPACE}.svc" for i in range(3)]
    pods = rollout.pods()
    assert sorted(pods) == [0, 1, 2]
    for pod in pods.values():
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "worker")
        assert container["image"] == CUSTOM
        assert container["ports"][0]["containerPort"] == 22  # the rest of the pod kept
    # Replaced one at a time, from the highest ordinal, as a rolling update does.
    assert rollout.replaced == [f"{STS}-1", f"{STS}-0"]
    image, annotations = template_of(rollout)
    assert image == CUSTOM
    assert annotations[ORIGINAL_IMAGE_ANNOTATION] == chart_image
    assert annotations[CUSTOM_IMAGE_ANNOTATION] == CUSTOM


def test_prepare_without_a_custom_image_touches_no_image(emulator, rollout, shell, chart_image):
    driver = driver_for(emulator, shell)
    driver.prepare(Run(num_workers=2))
    image, annotations = template_of(rollout)
    assert image == chart_image and not {ORIGINAL_IMAGE_ANNOTATION} & set(annotations)
    assert rollout.replaced == []


@pytest.mark.parametrize("all_nodes", [False, True], ids=["rank-0-only", "all-ranks"])
def test_the_command_runs_in_the_run_image_on_rank_0_or_every_rank(
    emulator, rollout, shell, chart_image, all_nodes
):
    driver = driver_for(emulator, shell)
    run = custom_run(num_workers=3, run_all_nodes=all_nodes)
    hosts = driver.prepare(run)
    argv = mpirun_argv(run, hosts, mpirun=driver.mpirun, python=driver.python)
    execution = driver.launch(run, argv, {"MLBENCH_RUN_TOKEN": "t"})
    assert run_to_end(execution) == 0

    [(pod, image, command)] = shell.launches()
    assert (pod, image) == (f"{STS}-0", CUSTOM)  # mpirun starts in pod 0, in the run's image
    mpirun = command[command.index("mpirun") :]
    ranks = mpirun[mpirun.index("-n") + 1]
    placed = mpirun[mpirun.index("--host") + 1].split(",")
    if all_nodes:
        assert ranks == "3" and placed == [f"{h}:1" for h in hosts]
    else:
        assert ranks == "1" and placed == [f"{hosts[0]}:1"]
    assert mpirun[-len(shlex.split(COMMAND)) :] == shlex.split(COMMAND)
    assert execution.record["kubernetes"]["image"] == {"custom": CUSTOM, "original": chart_image}
    assert_restored(rollout, chart_image)


def test_a_failed_run_puts_the_chart_image_back(emulator, rollout, shell, chart_image):
    driver = driver_for(emulator, shell)
    run = custom_run()
    shell.launch_code = 3
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    assert run_to_end(execution) == 3
    assert_restored(rollout, chart_image)


def test_killing_a_running_launch_puts_the_chart_image_back_after_stopping_it(
    emulator, rollout, shell, chart_image
):
    driver = driver_for(emulator, shell)
    run = custom_run()
    shell.launch_code = None
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    assert execution.poll() is None
    execution.kill()
    assert execution.poll() == 137
    # The ranks were stopped while the pods still ran the run's image, then it was undone.
    stops = [(pod, image) for pod, image, c in shell.calls if "signal KILL" in " ".join(c)]
    assert sorted(stops) == [(f"{STS}-0", CUSTOM), (f"{STS}-1", CUSTOM)]
    assert_restored(rollout, chart_image)


def test_a_cancel_from_another_master_process_puts_the_chart_image_back(
    emulator, rollout, shell, chart_image
):
    run = custom_run()
    job_side = driver_for(emulator, shell)
    shell.launch_code = None
    job_side.launch(run, mpirun_argv(run, job_side.prepare(run)), {})
    driver_for(emulator, shell).cancel(run)  # e.g. the API's DELETE, in the web process
    assert_restored(rollout, chart_image)


def test_an_image_that_cannot_be_pulled_fails_prepare_naming_it_and_is_undone(
    emulator, rollout, shell, chart_image
):
    driver = driver_for(emulator, shell, ready_timeout=PULL_WAIT)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    with pytest.raises(PrepareTimeout) as caught:
        driver.prepare(custom_run(custom_image_name=BROKEN))
    assert str(caught.value) == (
        f"workers not Ready after {PULL_WAIT} s: {STS}-1 Pending: image {BROKEN!r} cannot be pulled: "
        f'ImagePullBackOff: Back-off pulling image "{BROKEN}"'
    )
    # The rollout stalled at the first pod it replaced; the other kept the chart's image
    # and putting the template back rolls the stuck pod back too.
    assert rollout.replaced == [f"{STS}-1"]
    assert_restored(rollout, chart_image)
    assert not shell.launches()


def test_an_image_name_no_retry_can_cure_fails_at_once(emulator, rollout, shell, chart_image):
    driver = driver_for(emulator, shell, ready_timeout=60)
    started = time.monotonic()
    with pytest.raises(
        ClusterError, match=f"worker image {BAD_NAME!r} cannot be used: .*InvalidImageName"
    ):
        driver.prepare(custom_run(custom_image_name=BAD_NAME))
    assert time.monotonic() - started < 15  # not the minute of ready_timeout
    assert_restored(rollout, chart_image)


def test_an_image_that_never_gets_ready_says_what_a_custom_image_needs(
    emulator, rollout, shell, chart_image
):
    driver = driver_for(emulator, shell, ready_timeout=PULL_WAIT)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    with pytest.raises(PrepareTimeout) as caught:
        driver.prepare(custom_run(custom_image_name=NO_SSHD))
    message = str(caught.value)
    assert f"{STS}-1 Running: Readiness probe failed" in message
    assert f"image {NO_SSHD!r}" in message and "sshd on port 22" in message
    assert "FROM mlbench/mlbench_worker" in message
    assert_restored(rollout, chart_image)


def test_prepare_gives_up_when_the_image_is_put_back_while_it_waits(
    emulator, rollout, shell, chart_image
):
    """A cancel from the API restores the image while the job still waits for the pods:
    the job must not wait out its whole timeout for pods that will never come."""
    driver = driver_for(emulator, shell, ready_timeout=60)
    errors: list[BaseException] = []

    def prepare():
        try:
            driver.prepare(custom_run(custom_image_name=BROKEN))
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=prepare, daemon=True)
    thread.start()
    wait_for(lambda: template_of(rollout)[0] == BROKEN, "the job's patch")
    driver_for(emulator, shell).cancel(custom_run(custom_image_name=BROKEN))
    thread.join(15)
    assert not thread.is_alive()
    assert f"was changed to {chart_image!r} while the run waited" in str(errors[0])
    assert_restored(rollout, chart_image)
