"""When the master died mid-run: the next master (a new driver, the launch record, the
reconciliation at start-up) puts the chart's image back, never over someone else's."""

from __future__ import annotations

import pytest

from mlbench_master.cluster.kubernetes.names import (
    CUSTOM_IMAGE_ANNOTATION,
    ORIGINAL_IMAGE_ANNOTATION,
)
from tests.kubernetes.chart import NAMESPACE
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.custom_image.helpers import (
    CUSTOM,
    assert_restored,
    custom_run,
    driver_for,
    launch_and_die,
    started_run_whose_master_died,
    template_of,
)
from tests.kubernetes.emulator import wait_for


def test_after_a_master_died_the_next_run_puts_the_chart_image_back(
    emulator, rollout, shell, chart_image
):
    launch_and_die(emulator, shell, custom_run())
    assert template_of(rollout)[0] == CUSTOM
    hosts = driver_for(emulator, shell).prepare(Run(num_workers=2))  # a new master, a plain run
    assert len(hosts) == 2
    assert all(
        next(c for c in p["spec"]["containers"] if c["name"] == "worker")["image"] == chart_image
        for p in rollout.pods().values()
    )
    assert_restored(rollout, chart_image)


def test_the_launch_record_restores_when_the_statefulset_lost_its_annotations(
    emulator, rollout, shell, chart_image
):
    run = custom_run()
    record = launch_and_die(emulator, shell, run)
    rollout.apps.patch_namespaced_stateful_set(
        STS,
        NAMESPACE,
        {
            "metadata": {
                "annotations": {ORIGINAL_IMAGE_ANNOTATION: None, CUSTOM_IMAGE_ANNOTATION: None}
            }
        },
    )
    restarted = driver_for(emulator, shell)
    assert restarted.restore_image(Run(id=run.id)) is None  # no record anywhere: left alone
    assert restarted.restore_image(Run(id=run.id, launch=record)) == chart_image
    assert_restored(rollout, chart_image)


def test_an_image_someone_else_set_since_is_never_overwritten(emulator, rollout, shell):
    """`helm upgrade` with a new worker image while a custom image was in place: the
    upgrade's image stays, and only the stale record goes."""
    launch_and_die(emulator, shell, custom_run())
    sts = rollout.apps.read_namespaced_stateful_set(STS, NAMESPACE)
    containers = rollout.api_client.sanitize_for_serialization(sts.spec.template.spec.containers)
    containers[0]["image"] = "mlbench/mlbench_worker:0.3.0"
    rollout.apps.patch_namespaced_stateful_set(
        STS, NAMESPACE, {"spec": {"template": {"spec": {"containers": containers}}}}
    )
    assert driver_for(emulator, shell).restore_image() is None
    image, annotations = template_of(rollout)
    assert image == "mlbench/mlbench_worker:0.3.0"
    assert ORIGINAL_IMAGE_ANNOTATION not in annotations


@pytest.mark.django_db
def test_after_a_master_restart_the_run_is_watched_again_and_the_image_put_back_at_its_end(
    emulator, rollout, shell, master, chart_image, redis_settings, tmp_path
):
    from mlbench_master.api.models import LogChunk
    from mlbench_master.runs.jobs import run_job
    from mlbench_master.runs.reconcile import reconcile

    gate = tmp_path / "go"
    program = [
        "sh",
        "-c",
        'echo "[1,0]<stdout>: started"; while [ ! -e "$1" ]; do sleep 0.05; done; '
        'echo "[1,0]<stdout>: done"',
        "fake-mpirun",
        str(gate),
    ]
    run = started_run_whose_master_died(emulator, shell, program)

    notes = reconcile()  # what the restarted master's rq-runs container runs first
    run.refresh_from_db()
    assert run.state == "STARTED"
    assert notes == [
        f"run {run.pk}: ranks still running; its output is read again to end it truthfully"
    ]
    assert template_of(rollout)[0] == CUSTOM  # the run goes on in its image
    gate.touch()
    assert run_job(run.pk) == "FINISHED"  # the re-enqueued job, as an RQ worker runs it
    texts = [c.text for c in LogChunk.objects.filter(run=run).order_by("seq")]
    assert "".join(texts) == "started\ndone\n"
    assert_restored(rollout, chart_image)


@pytest.mark.django_db
def test_reconciliation_fails_a_run_whose_pod_0_was_replaced_and_puts_the_image_back(
    emulator, rollout, shell, master, chart_image, redis_settings
):
    from mlbench_master.runs.jobs import LOST
    from mlbench_master.runs.reconcile import reconcile

    run = started_run_whose_master_died(emulator, shell)
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
    assert_restored(rollout, chart_image)
