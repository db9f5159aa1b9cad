"""The open division on Kubernetes: a run's `custom_image_name` is what its worker pods run.

The API emulator stands in for the API server; `StatefulSetController` (emulator.py) plays
the StatefulSet controller and the kubelets continuously, so the driver's patch really rolls
the pods one by one, an image that cannot be pulled really stalls the rollout in
ImagePullBackOff, and putting the chart's image back really rolls them back. Commands in
pods go through the driver's exec seam (`PodShell` below), which also notes the image the
pod ran at that moment. The job-level tests run the real run job, reconciliation and
cancellation on the PostgreSQL of the test session.
"""

from __future__ import annotations

import shlex
import threading
import time
from typing import Any

import pytest

from mlbench_master.cluster.base import ClusterError, PrepareTimeout
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
from tests.kubernetes.emulator import Controller, StatefulSetController, wait_for

CUSTOM = "registry.example/team/resnet-variant:1"
BROKEN = "registry.example/team/never-pushed:1"
NO_SSHD = "docker.io/library/python:3.11-slim"
BAD_NAME = "registry.example/Team/Upper-Case:1"
COMMAND = "python /app/train.py --epochs 1"


class PodShell:
    """The driver's exec seam: answers as worker pods would, and records for every command
    the pod, the image that pod runs at that moment, and the command. The launch's scripts
    run for real here (conftest.py), with a stand-in for mpirun: it writes `output` and
    exits with `launch_code`, or runs until it is killed (None)."""

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


@pytest.fixture
def chart_image(worker_manifest) -> str:
    return worker_manifest["spec"]["template"]["spec"]["containers"][0]["image"]


@pytest.fixture
def rollout(emulator, worker_manifest):
    """The chart's worker StatefulSet, its controller and kubelets running."""
    Controller(emulator.client, NAMESPACE).create_statefulset(worker_manifest)
    with StatefulSetController(
        emulator.client,
        NAMESPACE,
        STS,
        unpullable={BROKEN: "ImagePullBackOff", BAD_NAME: "InvalidImageName"},
        never_ready={NO_SSHD},
    ) as control:
        yield control


@pytest.fixture
def shell(emulator, pod_state):
    seam = PodShell(emulator.client, str(pod_state))
    yield seam
    seam.close()


def _driver(emulator, shell, ready_timeout: float = 10) -> KubernetesCluster:
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


def _template(rollout) -> tuple[str, dict[str, str]]:
    sts = rollout.apps.read_namespaced_stateful_set(STS, NAMESPACE)
    image = next(c.image for c in sts.spec.template.spec.containers if c.name == "worker")
    return image, dict(sts.metadata.annotations or {})


def _assert_restored(rollout, chart_image: str) -> None:
    image, annotations = _template(rollout)
    assert image == chart_image
    assert ORIGINAL_IMAGE_ANNOTATION not in annotations
    assert CUSTOM_IMAGE_ANNOTATION not in annotations
    wait_for(lambda: rollout.settled(chart_image), "the pods back on the chart's image")


def _run_to_end(execution) -> int:
    deadline = time.monotonic() + 10
    while execution.poll() is None:
        assert time.monotonic() < deadline, "the launch did not end"
        execution.read(0.05)
    code = execution.poll()
    execution.kill()  # as the run job does after every launch
    return code


def _custom_run(**fields) -> Any:
    fields.setdefault("num_workers", 2)
    fields.setdefault("custom_image_name", CUSTOM)
    fields.setdefault("custom_image_command", COMMAND)
    return Run(**fields)


# ------------------------------------------------------------------------ the driver alone


def test_prepare_rolls_every_worker_onto_the_run_image_and_records_the_chart_image(
    emulator, rollout, shell, chart_image
):
    driver = _driver(emulator, shell)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    hosts = driver.prepare(_custom_run(num_workers=3))
    assert hosts == [f"{STS}-{i}.{STS}.{NAMESPACE}.svc" for i in range(3)]
    pods = rollout.pods()
    assert sorted(pods) == [0, 1, 2]
    for pod in pods.values():
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "worker")
        assert container["image"] == CUSTOM
        assert container["ports"][0]["containerPort"] == 22  # the rest of the pod kept
    # Replaced one at a time, from the highest ordinal, as a rolling update does.
    assert rollout.replaced == [f"{STS}-1", f"{STS}-0"]
    image, annotations = _template(rollout)
    assert image == CUSTOM
    assert annotations[ORIGINAL_IMAGE_ANNOTATION] == chart_image
    assert annotations[CUSTOM_IMAGE_ANNOTATION] == CUSTOM


def test_prepare_without_a_custom_image_touches_no_image(emulator, rollout, shell, chart_image):
    driver = _driver(emulator, shell)
    driver.prepare(Run(num_workers=2))
    image, annotations = _template(rollout)
    assert image == chart_image and not {ORIGINAL_IMAGE_ANNOTATION} & set(annotations)
    assert rollout.replaced == []


@pytest.mark.parametrize("all_nodes", [False, True], ids=["rank-0-only", "all-ranks"])
def test_the_command_runs_in_the_run_image_on_rank_0_or_every_rank(
    emulator, rollout, shell, chart_image, all_nodes
):
    driver = _driver(emulator, shell)
    run = _custom_run(num_workers=3, run_all_nodes=all_nodes)
    hosts = driver.prepare(run)
    argv = mpirun_argv(run, hosts, mpirun=driver.mpirun, python=driver.python)
    execution = driver.launch(run, argv, {"MLBENCH_RUN_TOKEN": "t"})
    assert _run_to_end(execution) == 0

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
    _assert_restored(rollout, chart_image)


def test_a_failed_run_puts_the_chart_image_back(emulator, rollout, shell, chart_image):
    driver = _driver(emulator, shell)
    run = _custom_run()
    shell.launch_code = 3
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    assert _run_to_end(execution) == 3
    _assert_restored(rollout, chart_image)


def test_killing_a_running_launch_puts_the_chart_image_back_after_stopping_it(
    emulator, rollout, shell, chart_image
):
    driver = _driver(emulator, shell)
    run = _custom_run()
    shell.launch_code = None
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    assert execution.poll() is None
    execution.kill()
    assert execution.poll() == 137
    # The ranks were stopped while the pods still ran the run's image, then it was undone.
    stops = [(pod, image) for pod, image, c in shell.calls if "signal KILL" in " ".join(c)]
    assert sorted(stops) == [(f"{STS}-0", CUSTOM), (f"{STS}-1", CUSTOM)]
    _assert_restored(rollout, chart_image)


def test_a_cancel_from_another_master_process_puts_the_chart_image_back(
    emulator, rollout, shell, chart_image
):
    run = _custom_run()
    job_side = _driver(emulator, shell)
    shell.launch_code = None
    job_side.launch(run, mpirun_argv(run, job_side.prepare(run)), {})
    _driver(emulator, shell).cancel(run)  # e.g. the API's DELETE, in the web process
    _assert_restored(rollout, chart_image)


def test_an_image_that_cannot_be_pulled_fails_prepare_naming_it_and_is_undone(
    emulator, rollout, shell, chart_image
):
    driver = _driver(emulator, shell, ready_timeout=1)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    with pytest.raises(PrepareTimeout) as caught:
        driver.prepare(_custom_run(custom_image_name=BROKEN))
    assert str(caught.value) == (
        f"workers not Ready after 1 s: {STS}-1 Pending: image {BROKEN!r} cannot be pulled: "
        f'ImagePullBackOff: Back-off pulling image "{BROKEN}"'
    )
    # The rollout stalled at the first pod it replaced; the other kept the chart's image
    # and putting the template back rolls the stuck pod back too.
    assert rollout.replaced == [f"{STS}-1"]
    _assert_restored(rollout, chart_image)
    assert not shell.launches()


def test_an_image_name_no_retry_can_cure_fails_at_once(emulator, rollout, shell, chart_image):
    driver = _driver(emulator, shell, ready_timeout=60)
    started = time.monotonic()
    with pytest.raises(
        ClusterError, match=f"worker image {BAD_NAME!r} cannot be used: .*InvalidImageName"
    ):
        driver.prepare(_custom_run(custom_image_name=BAD_NAME))
    assert time.monotonic() - started < 15  # not the minute of ready_timeout
    _assert_restored(rollout, chart_image)


def test_an_image_that_never_gets_ready_says_what_a_custom_image_needs(
    emulator, rollout, shell, chart_image
):
    driver = _driver(emulator, shell, ready_timeout=1)
    wait_for(lambda: rollout.settled(chart_image), "the install")
    with pytest.raises(PrepareTimeout) as caught:
        driver.prepare(_custom_run(custom_image_name=NO_SSHD))
    message = str(caught.value)
    assert f"{STS}-1 Running: Readiness probe failed" in message
    assert f"image {NO_SSHD!r}" in message and "sshd on port 22" in message
    assert "FROM mlbench/mlbench_worker" in message
    _assert_restored(rollout, chart_image)


def test_prepare_gives_up_when_the_image_is_put_back_while_it_waits(
    emulator, rollout, shell, chart_image
):
    """A cancel from the API restores the image while the job still waits for the pods:
    the job must not wait out its whole timeout for pods that will never come."""
    driver = _driver(emulator, shell, ready_timeout=60)
    errors: list[BaseException] = []

    def prepare():
        try:
            driver.prepare(_custom_run(custom_image_name=BROKEN))
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=prepare, daemon=True)
    thread.start()
    wait_for(lambda: _template(rollout)[0] == BROKEN, "the job's patch")
    _driver(emulator, shell).cancel(_custom_run(custom_image_name=BROKEN))
    thread.join(15)
    assert not thread.is_alive()
    assert f"was changed to {chart_image!r} while the run waited" in str(errors[0])
    _assert_restored(rollout, chart_image)


# ------------------------------------------------------------- when the master died mid-run


def _launch_and_die(emulator, shell, run) -> dict[str, Any]:
    """Prepare and launch with one master process that then dies: nothing is cleaned up,
    only the launch record (stored with the run by the job) and the cluster remain."""
    driver = _driver(emulator, shell)
    shell.launch_code = None
    execution = driver.launch(run, mpirun_argv(run, driver.prepare(run)), {})
    return execution.record


def test_after_a_master_died_the_next_run_puts_the_chart_image_back(
    emulator, rollout, shell, chart_image
):
    _launch_and_die(emulator, shell, _custom_run())
    assert _template(rollout)[0] == CUSTOM
    hosts = _driver(emulator, shell).prepare(Run(num_workers=2))  # a new master, a plain run
    assert len(hosts) == 2
    assert all(
        next(c for c in p["spec"]["containers"] if c["name"] == "worker")["image"] == chart_image
        for p in rollout.pods().values()
    )
    _assert_restored(rollout, chart_image)


def test_the_launch_record_restores_when_the_statefulset_lost_its_annotations(
    emulator, rollout, shell, chart_image
):
    run = _custom_run()
    record = _launch_and_die(emulator, shell, run)
    rollout.apps.patch_namespaced_stateful_set(
        STS,
        NAMESPACE,
        {
            "metadata": {
                "annotations": {ORIGINAL_IMAGE_ANNOTATION: None, CUSTOM_IMAGE_ANNOTATION: None}
            }
        },
    )
    restarted = _driver(emulator, shell)
    assert restarted.restore_image(Run(id=run.id)) is None  # no record anywhere: left alone
    assert restarted.restore_image(Run(id=run.id, launch=record)) == chart_image
    _assert_restored(rollout, chart_image)


def test_an_image_someone_else_set_since_is_never_overwritten(emulator, rollout, shell):
    """`helm upgrade` with a new worker image while a custom image was in place: the
    upgrade's image stays, and only the stale record goes."""
    _launch_and_die(emulator, shell, _custom_run())
    sts = rollout.apps.read_namespaced_stateful_set(STS, NAMESPACE)
    containers = rollout.api_client.sanitize_for_serialization(sts.spec.template.spec.containers)
    containers[0]["image"] = "mlbench/mlbench_worker:0.3.0"
    rollout.apps.patch_namespaced_stateful_set(
        STS, NAMESPACE, {"spec": {"template": {"spec": {"containers": containers}}}}
    )
    assert _driver(emulator, shell).restore_image() is None
    image, annotations = _template(rollout)
    assert image == "mlbench/mlbench_worker:0.3.0"
    assert ORIGINAL_IMAGE_ANNOTATION not in annotations


# ------------------------------------------------------------------ through the run's job


@pytest.fixture
def master(emulator, shell, monkeypatch):
    """Every get_driver() call is a new driver, as each process of a master has its own."""
    from mlbench_master.cluster import drivers

    monkeypatch.setattr(drivers, "get_driver", lambda name=None: _driver(emulator, shell))


def _stored_run(**fields):
    from mlbench_master.api.models import Run as RunRow

    fields.setdefault("name", "open division")
    fields.setdefault("num_workers", 2)
    fields.setdefault("max_bandwidth", 0)
    fields.setdefault("custom_image_name", CUSTOM)
    fields.setdefault("custom_image_command", COMMAND)
    return RunRow.objects.create(**fields)


@pytest.mark.django_db
@pytest.mark.parametrize(("code", "state"), [(0, "FINISHED"), (3, "FAILED")])
def test_the_job_runs_in_the_run_image_and_puts_the_chart_image_back(
    rollout, shell, master, chart_image, code, state
):
    from mlbench_master.jobs import run_job

    run = _stored_run()
    shell.launch_code = code
    assert run_job(run.pk) == state
    run.refresh_from_db()
    assert run.exit_code == code
    assert run.job_metadata["kubernetes"]["image"] == {"custom": CUSTOM, "original": chart_image}
    [(pod, image, _command)] = shell.launches()
    assert (pod, image) == (f"{STS}-0", CUSTOM)
    _assert_restored(rollout, chart_image)


@pytest.mark.django_db
def test_the_job_fails_a_run_whose_image_never_comes_naming_the_image(
    emulator, rollout, shell, chart_image, monkeypatch
):
    from mlbench_master.cluster import drivers
    from mlbench_master.jobs import run_job

    monkeypatch.setattr(
        drivers, "get_driver", lambda name=None: _driver(emulator, shell, ready_timeout=1)
    )
    run = _stored_run(custom_image_name=BROKEN)
    assert run_job(run.pk) == "FAILED"
    run.refresh_from_db()
    assert run.reason.startswith("workers not Ready after 1 s")
    assert f"image {BROKEN!r} cannot be pulled: ImagePullBackOff" in run.reason
    _assert_restored(rollout, chart_image)


@pytest.mark.django_db(transaction=True)
def test_a_run_cancelled_through_the_api_ends_cancelled_with_the_chart_image_back(
    rollout, shell, master, chart_image
):
    from django.db import connection

    from mlbench_master import runs
    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.jobs import run_job

    run = _stored_run()
    shell.launch_code = None
    ended: list[str] = []

    def job():
        try:
            ended.append(run_job(run.pk))
        finally:
            connection.close()

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    wait_for(lambda: shell.launches(), "the launch", limit=20)
    assert runs.cancel_run(RunRow.objects.get(pk=run.pk))  # what DELETE /api/runs/<id>/ does
    thread.join(20)
    assert ended == ["CANCELLED"]
    assert RunRow.objects.get(pk=run.pk).reason == "cancelled by a user"
    _assert_restored(rollout, chart_image)


def _started_run_whose_master_died(emulator, shell, program: list[str] | None = None):
    """A stored run, STARTED and launched by a master process that then died."""
    from mlbench_master import runs

    run = _stored_run()
    shell.custom_program = program
    record = _launch_and_die(emulator, shell, runs.run_spec(run))
    assert runs.mark_started(run)
    runs.record_launch(run, record)
    return run


@pytest.mark.django_db
def test_after_a_master_restart_the_run_is_watched_again_and_the_image_put_back_at_its_end(
    emulator, rollout, shell, master, chart_image, redis_settings, tmp_path
):
    from mlbench_master.api.models import LogChunk
    from mlbench_master.jobs import run_job
    from mlbench_master.reconcile import reconcile

    gate = tmp_path / "go"
    program = [
        "sh",
        "-c",
        'echo "[1,0]<stdout>: started"; while [ ! -e "$1" ]; do sleep 0.05; done; '
        'echo "[1,0]<stdout>: done"',
        "fake-mpirun",
        str(gate),
    ]
    run = _started_run_whose_master_died(emulator, shell, program)

    notes = reconcile()  # what the restarted master's rq-runs container runs first
    run.refresh_from_db()
    assert run.state == "STARTED"
    assert notes == [
        f"run {run.pk}: ranks still running; its output is read again to end it truthfully"
    ]
    assert _template(rollout)[0] == CUSTOM  # the run goes on in its image
    gate.touch()
    assert run_job(run.pk) == "FINISHED"  # the re-enqueued job, as an RQ worker runs it
    texts = [c.text for c in LogChunk.objects.filter(run=run).order_by("seq")]
    assert "".join(texts) == "started\ndone\n"
    _assert_restored(rollout, chart_image)


@pytest.mark.django_db
def test_reconciliation_fails_a_run_whose_pod_0_was_replaced_and_puts_the_image_back(
    emulator, rollout, shell, master, chart_image, redis_settings
):
    from mlbench_master.jobs import LOST
    from mlbench_master.reconcile import reconcile

    run = _started_run_whose_master_died(emulator, shell)
    old = rollout.pods()[0]["metadata"]["uid"]
    rollout.core.delete_namespaced_pod(f"{STS}-0", NAMESPACE)  # an eviction, say
    wait_for(
        lambda: rollout.pods().get(0, {}).get("metadata", {}).get("uid") not in (None, old),
        "the new pod 0",
    )

    notes = reconcile()
    run.refresh_from_db()
    assert run.state == "FAILED"
    assert run.reason == (
        f"{LOST} (pod {STS}-0, where mpirun ran, was replaced by a new pod of that name; "
        "mpirun's output and exit code were in it; its ranks were stopped)"
    )
    assert notes == [f"run {run.pk}: FAILED, ranks stopped ({run.reason})"]
    _assert_restored(rollout, chart_image)
