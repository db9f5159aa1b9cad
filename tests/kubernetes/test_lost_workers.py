"""A worker pod lost mid-run is the first cause of the run's failure, in Kubernetes' words.

mpirun's stand-in runs detached, for real, as in the re-attach tests (conftest.py): it
prints, waits for the test's "end" file, then writes what rank 0 writes when its peer's pod
goes (a complaint and its watcher's end line, code 14) and exits 14. Meanwhile the test
does to the emulator's pods what Kubernetes would: deletes one, replaces it, evicts it,
restarts its worker container for memory. Without the driver's view the reason would be
"rank 0 exited with code 14", and a person would debug rank 0.
"""

from __future__ import annotations

import pytest

from mlbench_master.cluster import node_kinds
from mlbench_master.cluster.failures import OutputTail
from mlbench_master.cluster.kubernetes import losses
from mlbench_master.cluster.mpirun import RANK_END
from tests.kubernetes.chart import NAMESPACE
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.controllers import pod_manifest
from tests.kubernetes.emulator import wait_for
from tests.kubernetes.reattach.helpers import alive, die, read_to_end, read_until, restarted_driver

POD0, POD1, POD2 = (f"{STS}-{i}" for i in range(3))
# Rank 0 notices its peer is gone and ends first with its own complaint: what mpirun reports.
RANK_0_COMPLAINS = f"""
echo "[1,0]<stdout>: epoch 1"
while [ ! -e "$1/end" ]; do sleep 0.05; done
echo "[1,0]<stderr>: lost the connection to rank 1" >&2
echo "[1,0]<stderr>: {RANK_END} code=14 pid=40 time=1795696923.5" >&2
exit "$2"
"""
RANKS_SAY = "then: rank 0 exited with code 14; last lines of stderr:\n"
RANKS_SAY += "[rank 0] lost the connection to rank 1"
OOM = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2026-11-26T10:00:05Z"}
LOW_MEMORY = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."


@pytest.fixture
def workers(controller):
    """Three Ready worker pods; pod 1 on node-3 (the others on node-a), its worker
    container started once before (restartCount 2), as a kubelet reports it."""
    controller.make_ready(controller.create_pods(STS, count=3))
    controller.core.patch_namespaced_pod(POD1, NAMESPACE, {"spec": {"nodeName": "node-3"}})
    container_status(controller, POD1, restarts=2)
    return controller


def container_status(controller, pod, restarts, last=None, ended=None):
    """The worker container's status as the kubelet writes it: running, or `ended`."""
    state = {"terminated": ended} if ended else {"running": {"startedAt": "2026-11-26T09:00:00Z"}}
    status = {"name": "worker", "image": "w", "imageID": "", "ready": not ended,
              "restartCount": restarts, "state": state,
              "lastState": {"terminated": last} if last else {}}  # fmt: skip
    controller.core.patch_namespaced_pod_status(
        pod, NAMESPACE, {"status": {"containerStatuses": [status]}}
    )


def uid(controller, pod) -> str:
    return controller.core.read_namespaced_pod(pod, NAMESPACE).metadata.uid


def pod_event(controller, pod, pod_uid, reason, message, when, kind="Warning"):
    """An event about the pod of uid `pod_uid`, as Kubernetes' controllers write them."""
    involved = {"kind": "Pod", "name": pod, "namespace": NAMESPACE, "uid": pod_uid}
    controller.core.create_namespaced_event(NAMESPACE, {
        "apiVersion": "v1", "kind": "Event", "involvedObject": involved,
        "metadata": {"name": f"{pod}.{reason}.{pod_uid[:8]}", "namespace": NAMESPACE},
        "reason": reason, "message": message, "type": kind, "lastTimestamp": when,
    })  # fmt: skip


def replace(controller, pod) -> None:
    """The StatefulSet controller makes the deleted pod again: same name, new uid."""
    controller.delete_pod(pod)
    template = controller.statefulset(STS)["spec"]["template"]
    manifest = pod_manifest(pod, NAMESPACE, template["metadata"], template["spec"])
    controller.core.create_namespaced_pod(NAMESPACE, manifest)
    controller.set_phase(pod, "Running", ready=True, ip="10.0.0.99")


def evict(controller, pod, when="2026-11-26T10:00:03Z") -> None:
    """What the kubelet writes of a pod it evicted for memory pressure."""
    conditions = [
        {"type": "Ready", "status": "False", "lastTransitionTime": when},
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": LOW_MEMORY, "lastTransitionTime": when},
    ]  # fmt: skip
    status = {"phase": "Failed", "reason": "Evicted", "message": LOW_MEMORY}
    controller.core.patch_namespaced_pod_status(
        pod, NAMESPACE, {"status": {**status, "conditions": conditions}}
    )


def launch(driver, pods_exec, gates, num_workers=3, code=14):
    pods_exec.program = ["sh", "-c", RANK_0_COMPLAINS, "fake-mpirun", str(gates), str(code)]
    execution = driver.launch(Run(num_workers=num_workers), ["unused"], {})
    read_until(execution, 1)  # it runs
    return execution


def reason_at_end(execution, gates) -> str:
    """The FAILED reason as the job (jobs._end) makes it of what the launch ended with."""
    (gates / "end").touch()
    tail = OutputTail()
    tail.add(read_to_end(execution))
    why = execution.end_reason()
    return tail.with_stderr(why) if why is not None else tail.reason(execution.poll())


def lose_deleted(controller):
    pod_event(controller, POD1, uid(controller, POD1), "TaintManagerEviction",
              f"Marking for deletion Pod {NAMESPACE}/{POD1}", "2026-11-26T10:00:02Z")  # fmt: skip
    pod_event(controller, POD1, uid(controller, POD1), "Killing",
              "Stopping container worker", "2026-11-26T10:00:04Z", kind="Normal")  # fmt: skip
    controller.delete_pod(POD1)


def lose_replaced(controller):
    old = uid(controller, POD1)
    replace(controller, POD1)
    # The new pod's own events are not about the old one.
    pod_event(
        controller, POD1, uid(controller, POD1), "FailedMount", "new pod", "2026-11-26T11:00:00Z"
    )
    pod_event(controller, POD1, old, "Killing", "Stopping container worker",
              "2026-11-26T10:00:04Z", kind="Normal")  # fmt: skip


def lose_being_deleted(controller):
    # A finalizer keeps the pod while it is deleted, as a kubelet that cannot be reached does.
    patch = {"metadata": {"finalizers": ["example.com/hold"]}}
    controller.core.patch_namespaced_pod(POD1, NAMESPACE, patch)
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                 "message": "Taint manager: deleting due to NoExecute taint"}  # fmt: skip
    controller.core.patch_namespaced_pod_status(
        POD1, NAMESPACE, {"status": {"conditions": [condition]}}
    )
    controller.delete_pod(POD1)


def lose_node(controller):
    # What the node controller wrote of the pods of a node that stopped answering.
    status = {"phase": "Unknown", "reason": "NodeLost", "message": UNRESPONSIVE}
    controller.core.patch_namespaced_pod_status(POD1, NAMESPACE, {"status": status})


UNRESPONSIVE = f"Node node-3 which was running pod {POD1} is unresponsive"


@pytest.mark.parametrize(
    ("lose", "head"),
    [
        (
            lose_deleted,
            f"worker pod {POD1} was deleted (it ran on node node-3; its last event: "
            f"TaintManagerEviction: Marking for deletion Pod {NAMESPACE}/{POD1})",
        ),
        (
            lose_replaced,
            f"worker pod {POD1} was deleted and replaced by a new pod (the old one ran on "
            "node node-3; its last event: Killing: Stopping container worker)",
        ),
        (lambda c: evict(c, POD1), f"worker pod {POD1} was evicted from node node-3: {LOW_MEMORY}"),
        (
            lose_being_deleted,
            f"worker pod {POD1} is being deleted (on node node-3; DeletionByTaintManager: "
            "Taint manager: deleting due to NoExecute taint)",
        ),
        (lose_node, f"worker pod {POD1} lost its node node-3: {UNRESPONSIVE}"),
    ],
    ids=["deleted", "replaced", "evicted", "being-deleted", "node-lost"],
)
def test_a_pod_lost_mid_run_comes_before_the_rank_that_complained(
    driver, workers, pods_exec, gates, lose, head
):
    execution = launch(driver, pods_exec, gates)
    lose(workers)
    assert reason_at_end(execution, gates) == f"{head}; {RANKS_SAY}"
    assert execution.poll() == 14 and execution.exit_known


def test_a_worker_container_restarted_for_memory_is_named_with_the_kubelets_words(
    driver, workers, pods_exec, gates
):
    execution = launch(driver, pods_exec, gates)
    container_status(workers, POD1, restarts=3, last=OOM)
    assert reason_at_end(execution, gates) == (
        f"the worker container of pod {POD1} was restarted: OOMKilled (exit code 137) at "
        f"2026-11-26T10:00:05Z; {RANKS_SAY}"
    )


def test_a_container_end_the_kubelet_reports_late_is_still_found(driver, workers, pods_exec, gates):
    """mpirun may end before the kubelet has told the API that the container ended: the
    driver looks once more (KUBELET_LAG) before it says no pod was lost."""
    looks = []
    first_look = driver.workers_lost

    def kubelet_reports_after_the_first_look(recorded, launcher=""):
        found = first_look(recorded, launcher)
        looks.append(found)
        container_status(workers, POD1, restarts=2, ended=OOM)  # not restarted yet
        return found

    driver.workers_lost = kubelet_reports_after_the_first_look
    execution = launch(driver, pods_exec, gates)
    assert reason_at_end(execution, gates).startswith(
        f"the worker container of pod {POD1} ended: OOMKilled (exit code 137) at "
        "2026-11-26T10:00:05Z; then: rank 0"
    )
    assert looks == [None, execution.end_reason()]


def test_two_pods_lost_are_named_earliest_first(driver, workers, pods_exec, gates):
    execution = launch(driver, pods_exec, gates)
    # Pod 1 is listed first, but pod 2 went two seconds before it.
    container_status(workers, POD1, restarts=3, last=OOM)
    evict(workers, POD2, when="2026-11-26T10:00:03Z")
    assert reason_at_end(execution, gates) == (
        f"worker pod {POD2} was evicted from node node-a: {LOW_MEMORY}; then: the worker "
        f"container of pod {POD1} was restarted: OOMKilled (exit code 137) at "
        f"2026-11-26T10:00:05Z; {RANKS_SAY}"
    )


def test_nothing_lost_leaves_the_ranks_reason(driver, workers, pods_exec, gates):
    execution = launch(driver, pods_exec, gates)
    assert execution.record["kubernetes"][losses.RECORD_KEY] == [
        {"pod": POD0, "uid": uid(workers, POD0), "node": "node-a", "restarts": 0},
        {"pod": POD1, "uid": uid(workers, POD1), "node": "node-3", "restarts": 2},
        {"pod": POD2, "uid": uid(workers, POD2), "node": "node-a", "restarts": 0},
    ]
    # The nodes the run is priced by (results/cost.py): node-a once for its two pods.
    assert execution.record[node_kinds.RECORD_KEY] == [
        {"name": "node-a", "kinds": ["node-a", "kubernetes"], "workers": 2, "capacity": ""},
        {"name": "node-3", "kinds": ["node-3", "kubernetes"], "workers": 1, "capacity": ""},
    ]
    assert reason_at_end(execution, gates) == RANKS_SAY.replace("then: ", "", 1)
    assert execution.end_reason() is None


def test_a_launch_that_succeeds_or_is_stopped_names_no_loss(driver, workers, pods_exec, gates):
    """Exit 0 is a finished run whatever happened to a pod after its ranks were done, and
    a run stopped on purpose (cancel, time limit) is not failed by its pods."""
    finished = launch(driver, pods_exec, gates, code=0)
    evict(workers, POD2)
    reason_at_end(finished, gates)
    assert finished.poll() == 0 and finished.end_reason() is None

    (gates / "second").mkdir()
    stopped = launch(driver, pods_exec, gates / "second")
    stopped.kill()  # the job's cancel: the pods are stopped, on purpose
    assert stopped.poll() == 137 and stopped.end_reason() is None


def test_an_old_launch_record_without_the_pods_compares_nothing(driver, workers):
    assert losses.from_record(None) == [] and losses.from_record({"pod": POD1}) == []
    assert losses.from_record([{"pod": POD1, "restarts": "x"}, "junk", {"uid": "u"}]) == [
        losses.Seen(POD1, "", "", 0)
    ]
    assert driver.workers_lost(None) is None


@pytest.mark.django_db
def test_a_restarted_master_reads_the_pods_back_and_names_the_lost_one(
    driver, emulator, workers, pods_exec, pod_state, gates, monkeypatch, redis_settings
):
    from mlbench_master.api.models import Run as RunRow
    from mlbench_master.cluster import drivers
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.jobs import run_job

    row = RunRow.objects.create(name="lost-a-pod", num_workers=3, max_bandwidth=0)
    execution = launch(driver, pods_exec, gates)
    assert lifecycle.mark_started(row)
    lifecycle.record_launch(row, execution.record)
    die(pods_exec)  # the master goes away; the run goes on
    lose_replaced(workers)
    (gates / "end").touch()
    wait_for(lambda: not alive(pod_state), "the end of the run")

    # The new master's job has only what the database kept of the launch.
    monkeypatch.setattr(
        drivers, "get_driver", lambda name=None: restarted_driver(emulator, pods_exec, pod_state)
    )
    assert run_job(row.pk) == "FAILED"
    row.refresh_from_db()
    assert row.exit_code == 14
    assert row.reason == (
        f"worker pod {POD1} was deleted and replaced by a new pod (the old one ran on node "
        f"node-3; its last event: Killing: Stopping container worker); {RANKS_SAY}"
    )
