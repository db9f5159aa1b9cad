"""The master pod ends on purpose: the chart's preStop hook (`stop-runs`) stops its runs.

The run is marked FAILED and stopped the way a cancel stops it: its detached launch in pod
0 by the launch's marker (really, here: the launch scripts run on this machine), then the
run's processes in every running worker pod by name. Without the database the driver's
stop_all still asks every running pod to stop them. The hook itself is checked in the
rendered chart and in the master image's entry point.
"""

from __future__ import annotations

import re

import pytest

from mlbench_master.cluster.kubernetes import detach, shell
from mlbench_master.runs import stopping
from tests.kubernetes.chart import CHART, RELEASE, find, manifests
from tests.kubernetes.conftest import STS
from tests.kubernetes.reattach.helpers import alive, stepped_run

ENTRYPOINT = CHART.parents[1] / "scripts" / "k8s" / "master-entrypoint.sh"


@pytest.mark.django_db(transaction=True)
def test_the_master_stopping_stops_its_run_as_a_cancel_does(
    driver, workers, pods_exec, pod_state, gates, master, settings, tmp_path
):
    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.runs import lifecycle

    settings.MLBENCH_HOME = tmp_path
    row = RunRow.objects.create(name="the-master-ends", num_workers=2, max_bandwidth=0)
    stepped_run(pods_exec, gates)  # never let through its gates: it runs until stopped
    execution = driver.launch(lifecycle.run_spec(row), ["unused"], {})
    assert lifecycle.mark_started(row)
    lifecycle.record_launch(row, execution.record)
    assert alive(pod_state)

    report = stopping.stop_runs()

    assert not alive(pod_state)
    row.refresh_from_db()
    assert (row.state, row.reason) == ("FAILED", stopping.MASTER_STOPPED)
    assert report.lines() == [f"run {row.pk} was stopped and marked FAILED ({row.reason})"]
    stops = pods_exec.named(detach.STOP)
    assert [pod for pod, _ in stops] == [f"{STS}-0"]
    assert stops[0][1][-1] == execution.record["kubernetes"]["launch_id"]
    # By name in both pods: the cancel with the run's record, then stop_all without one.
    stop = " ".join(shell.stop_run())
    assert sorted(p for p, c in pods_exec.calls if " ".join(c) == stop) == sorted(
        [f"{STS}-0", f"{STS}-1"] * 2
    )


def test_stop_all_needs_no_run_record(driver, controller, pods_exec):
    names = controller.create_pods(STS, count=3)
    controller.make_ready(names[:2])  # the third is Pending: nothing can run there
    assert driver.stop_all() == []
    stop = " ".join(shell.stop_run())
    assert [(p, " ".join(c)) for p, c in pods_exec.calls] == [(names[0], stop), (names[1], stop)]


def _rq_container(values=None):
    deployment = find(manifests(values), "Deployment", f"{RELEASE}-mlbench-master")
    spec = deployment["spec"]["template"]["spec"]
    return spec, next(c for c in spec["containers"] if c["name"] == "rq-runs")


def test_the_chart_runs_stop_runs_before_the_master_pod_ends():
    spec, container = _rq_container()
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command == ["/usr/local/bin/mlbench-master", "stop-runs"]
    # Time for the hook: the database's patience and the pods' stop after it.
    assert spec["terminationGracePeriodSeconds"] >= stopping.DATABASE_PATIENCE + 30
    # The entry point's role runs the master's command (its output to the container's log).
    role = re.search(r"^stop-runs\)\n(.*?)^    ;;", ENTRYPOINT.read_text(), re.M | re.S)
    assert role, "the entry point has no stop-runs role"
    assert "python -m mlbench_master stop-runs >/proc/1/fd/1" in role.group(1)
    assert role.group(1).rstrip().endswith("exec python -m mlbench_master stop-runs")


def test_runs_can_be_let_outlive_the_master_pod():
    spec, container = _rq_container(
        {"master": {"stopRunsOnExit": False, "terminationGracePeriodSeconds": 30}}
    )
    assert "lifecycle" not in container
    assert spec["terminationGracePeriodSeconds"] == 30
