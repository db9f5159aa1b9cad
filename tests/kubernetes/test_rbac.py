"""The chart's Role grants exactly the Kubernetes API calls the driver makes.

The calls are not listed by hand: every driver method runs against the API emulator with
the real exec channel (websocket) and the emulator's request log is turned into RBAC
(apiGroup, resource, verb) triples, the way the API server's authorizer sees them.
"""

from __future__ import annotations

import threading

import pytest

from mlbench_master.cluster.base import CannotAttach, ClusterError
from mlbench_master.cluster.kubernetes import KubernetesCluster
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.conftest import STS, Run
from tests.kubernetes.emulator import wait_for

DRIVER_AGENT = "mlbench-driver-under-test"
VERBS = {"LIST": "list", "WATCH": "watch", "FETCH": "get", "CREATE": "create", "DELETE": "delete"}


def _rbac_triples(requests) -> set[tuple[str, str, str]]:
    triples = set()
    for request in requests:
        if request.resource is None:
            continue  # discovery (/api, /apis): allowed to every authenticated user
        resource = request.resource.plural
        if request.subresource:
            resource += f"/{request.subresource}"
        action = request.action.name
        if action == "UPDATE":
            verb = "patch" if request.method.name == "PATCH" else "update"
        else:
            verb = VERBS[action]
        triples.add((request.resource.group, resource, verb))
    return triples


def _exercise_every_driver_call(emulator, controller) -> list:
    """Run each driver method once, down every path that talks to the API."""
    from kubernetes import client

    api_client = client.ApiClient(emulator.client.configuration)
    api_client.user_agent = DRIVER_AGENT
    driver = KubernetesCluster(
        api_client=api_client,
        namespace=NAMESPACE,
        release=RELEASE,
        ready_timeout=0.2,
        poll_interval=0.05,
        master_url="http://127.0.0.1:8000",
    )
    run = Run(num_workers=2, num_cpus=2, max_bandwidth=100)
    driver.pods()
    names = controller.create_pods(STS, count=1)
    with pytest.raises(ClusterError):  # times out on a Pending pod: reads its events
        driver.prepare(Run(num_workers=3, num_cpus=1))
    driver.ready_timeout = 10
    done = threading.Event()
    thread = threading.Thread(target=lambda: (driver.prepare(run), done.set()), daemon=True)
    thread.start()
    # The pods must come from the patched template (2 replicas, 2 CPUs), as a real
    # StatefulSet controller would make them after the driver's patch.
    wait_for(lambda: controller.statefulset(STS)["spec"]["replicas"] == 2, "the scale-down")
    wait_for(
        lambda: (
            controller.statefulset(STS)["spec"]["template"]["spec"]["containers"][0]["resources"][
                "limits"
            ].get("cpu")
            in ("2", 2, "2000m")
        ),
        "the new CPU limit",
    )
    controller.delete_pod(names[0])
    controller.make_ready(controller.create_pods(STS))
    thread.join(10)
    assert done.is_set()
    # The emulator cannot upgrade to a websocket: exec is refused after being asked for.
    with pytest.raises(ClusterError, match="cannot"):
        driver.launch(run, ["true"], {})
    launched = Run(
        num_workers=2,
        launch={
            "kubernetes": {
                "pods": [f"{STS}-0", f"{STS}-1"],
                "launcher": f"{STS}-0",
                "launcher_uid": "",
                "dir": "/var/lib/mlbench/launches/run-7-abc",
                "launch_id": "abc",
            }
        },
    )
    with pytest.raises(ClusterError):
        driver.cancel(launched)
    assert driver.is_running(launched) is False  # the pods could not be asked
    with pytest.raises(CannotAttach, match="cannot read its launch"):
        driver.attach(launched)
    assert driver.checkpoint_dir(7) == "/var/lib/mlbench/checkpoints/run-7"
    driver.samples(run)
    # The driver's requests; the websocket client sends no agent, and only the driver execs.
    return [
        r
        for r in emulator.requests()
        if r.headers.get("User-Agent") == DRIVER_AGENT or r.subresource == "exec"
    ]


def test_role_grants_exactly_what_the_driver_calls(emulator, controller):
    driver_requests = _exercise_every_driver_call(emulator, controller)
    used = _rbac_triples(driver_requests)
    assert ("", "pods/exec", "get") in used  # the websocket exec request was made
    # Since Kubernetes 1.35 a websocket exec upgrade is also authorized as "create".
    used.add(("", "pods/exec", "create"))

    role = find(manifests(), "Role", f"{RELEASE}-mlbench-master")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == used

    # Where the Role names objects, the driver only touched those objects.
    named = {
        (g, r): set(rule["resourceNames"])
        for rule in role["rules"]
        if "resourceNames" in rule
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert named[("apps", "statefulsets")] == {STS}
    for request in driver_requests:
        if request.resource is None:
            continue
        key = (request.resource.group, request.resource.plural)
        if request.subresource:
            key = (key[0], f"{key[1]}/{request.subresource}")
        if key in named:
            assert request.name in named[key], (key, request.name)


def test_the_master_has_no_cluster_wide_rights():
    objects = manifests()
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    binding = find(objects, "RoleBinding", f"{RELEASE}-mlbench-master")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": f"{RELEASE}-mlbench-master",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-mlbench-master", "namespace": NAMESPACE}
    ]
    master = find(objects, "Deployment", f"{RELEASE}-mlbench-master")
    assert master["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-mlbench-master"
    worker = find(objects, "StatefulSet", STS)["spec"]["template"]["spec"]
    assert worker["automountServiceAccountToken"] is False
