#!/bin/bash
# make e2e-kind: the whole Kubernetes path on a throwaway kind cluster.
#   1. create a kind cluster (one control plane, two worker nodes)
#   2. build both images and load them into the cluster's nodes
#   3. helm install charts/mlbench (images from step 2, small CPU limits)
#   4. the original client's discovery: exactly one pod and one service labelled
#      component=master,app=mlbench, and the master pod answering on its IP, port 80
#   5. one 2-worker run of the default benchmark through the REST API (synthetic data,
#      one short epoch) that must end FINISHED
#   6. an open-division run in another image (the worker image under another name) with a
#      command on every rank: FINISHED, its output from both pods, the chart's image back
#   7. a run that outlives a restart of the master (kubectl rollout restart, as a `helm
#      upgrade` of the master does): FINISHED, the lines from before and after the restart
#      each exactly once in its log
#   8. delete the cluster (KEEP_CLUSTER=1 keeps it for a look around)
# Needs docker (with a running engine), kind, kubectl, helm (3.8+), curl, python3.
#
# What has run, and where: steps 2, 5 and 7 have a counterpart without a cluster in
# tests/images (`make test`): both images built (on a debootstrap base, with the host's pip
# configuration as build secrets), the master's containers (web, rq-runs, collector, the
# migrate init step) and two worker containers configured as the chart's pods, the
# Kubernetes API served by an emulator whose pod exec goes into the containers; a 2-worker
# ResNet-20 run FINISHED over ssh + mpirun between the containers with its metrics posted to
# the master container, a master kill and restart mid-run re-attached, cancel leaving no rank.
# Only this script (a real cluster) shows: the kubelet, the container runtime applying the
# chart's sysctls and probes, cluster DNS, RBAC enforced by an API server, scheduling and
# rolling updates, image pulls, and a master pod replaced by a new pod (new hostname).
# This script itself has not been run on this project's machines (no kind, no helm there).
set -euo pipefail

cluster="${KIND_CLUSTER:-mlbench-e2e}"
release="${RELEASE:-e2e}"
namespace="${NAMESPACE:-mlbench-e2e}"
tag="e2e-$(date +%s)"
port="${PORT:-18080}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"

for tool in docker kind kubectl helm curl python3; do
    command -v "$tool" >/dev/null || { echo "e2e-kind needs $tool on PATH" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind needs a running Docker engine" >&2; exit 2; }

forward_pid=""
cleanup() {
    status=$?
    [ -n "$forward_pid" ] && kill "$forward_pid" 2>/dev/null || true
    [ -n "${run_script:-}" ] && rm -f "$run_script"
    if [ "$status" -ne 0 ]; then
        echo "== FAILED; state of the release:" >&2
        kubectl get pods,events --namespace "$namespace" 2>/dev/null | tail -40 >&2 || true
        kubectl logs --namespace "$namespace" "deployment/$release-mlbench-master" \
            --all-containers --tail 60 2>/dev/null >&2 || true
    fi
    if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
        echo "== keeping kind cluster $cluster (kind delete cluster --name $cluster)"
    else
        kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    fi
    exit "$status"
}
trap cleanup EXIT

echo "== 1. kind cluster $cluster"
kind create cluster --name "$cluster" --wait 180s --config - <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
KIND

echo "== 2. images (tag $tag)"
# BuildKit (the Dockerfiles mount pip's configuration as secrets); IMAGE_BUILD_ARGS adds e.g.
# "--base local --pip-conf host" where Docker Hub or PyPI cannot be reached directly.
# shellcheck disable=SC2086
python3 scripts/images/build.py --registry mlbench --tag "$tag" ${IMAGE_BUILD_ARGS:-}
custom="mlbench/e2e-custom-worker:$tag"
docker tag "mlbench/mlbench_worker:$tag" "$custom"
kind load docker-image --name "$cluster" "mlbench/mlbench_master:$tag" \
    "mlbench/mlbench_worker:$tag" "$custom"

echo "== 3. helm install $release into namespace $namespace"
helm upgrade --install "$release" charts/mlbench \
    --namespace "$namespace" --create-namespace --wait --timeout 15m \
    --set master.image.tag="$tag" --set master.image.pullPolicy=Never \
    --set worker.image.tag="$tag" --set worker.image.pullPolicy=Never \
    --set limits.workers=2 --set limits.cpu=500m --set limits.bandwidth=1000 \
    --set worker.resources.requests.memory=512Mi --set worker.resources.limits.memory=2Gi \
    --set postgresql.persistence.size=1Gi

token="$(kubectl get secret --namespace "$namespace" "$release-mlbench-secrets" \
    -o jsonpath='{.data.admin-token}' | base64 -d)"
url="http://127.0.0.1:$port"
# (Again after a restart of the master: a port-forward ends with the pod it reached.)
forward() {
    [ -n "$forward_pid" ] && kill "$forward_pid" 2>/dev/null || true
    kubectl port-forward --namespace "$namespace" "svc/$release-mlbench-master" "$port:80" \
        >/dev/null &
    forward_pid=$!
    for _ in $(seq 60); do
        curl -fsS "$url/api/health/" >/dev/null 2>&1 && break
        sleep 2
    done
    curl -fsS "$url/api/health/"; echo
}
forward

echo "== 4. the original client's discovery"
selector="component=master,app=mlbench"
pods="$(kubectl get pods --namespace "$namespace" -l "$selector" -o name | wc -l)"
services="$(kubectl get services --all-namespaces -l "$selector" -o name | wc -l)"
[ "$pods" -eq 1 ] && [ "$services" -eq 1 ] || {
    echo "discovery labels on $pods pods and $services services, not one each" >&2; exit 1; }
pod_ip="$(kubectl get pods --namespace "$namespace" -l "$selector" \
    -o jsonpath='{.items[0].status.podIP}')"
kubectl exec --namespace "$namespace" "$release-mlbench-worker-0" -- python -c \
    "import urllib.request as u; print(u.urlopen(u.Request('http://$pod_ip:80/api/health/', headers={'Host': 'localhost'}), timeout=10).read().decode())"

# Starts the run whose JSON body is $RUN (or takes run $RUN_ID), waits for its end, prints
# the end of its log; fails unless it FINISHED with every |-separated text of $EXPECT in
# that log (exactly once each with ONCE=1). With STARTED_WITH=TEXT it only starts the run,
# waits until TEXT is in its log and prints the run's id.
run_script="$(mktemp)"
cat > "$run_script" <<'PY'
import json, os, sys, time, urllib.request

url, token = os.environ["MLBENCH_URL"], os.environ["MLBENCH_TOKEN"]

def call(method, path, body=None):
    request = urllib.request.Request(
        url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")

def log_lines(run_id):
    lines, offset = [], 0
    while True:  # the log, page by page
        page = call("GET", f"/api/runs/{run_id}/logs/?offset={offset}")
        lines += [c["text"].rstrip() for c in page["chunks"]]
        if not page["chunks"] or page["next_offset"] == offset:
            return lines
        offset = page["next_offset"]

if os.environ.get("RUN_ID"):
    run = call("GET", f"/api/runs/{os.environ['RUN_ID']}/")
else:
    pods = call("GET", "/api/pods/")
    print("workers:", [(p["name"], p["phase"]) for p in pods], file=sys.stderr)
    run = call("POST", "/api/runs/", json.loads(os.environ["RUN"]))
    print("run", run["id"], run["state"], file=sys.stderr)
started_with = os.environ.get("STARTED_WITH")
deadline = time.monotonic() + 1800
while time.monotonic() < deadline:
    run = call("GET", f"/api/runs/{run['id']}/")
    if run["state"] in ("FINISHED", "FAILED", "CANCELLED"):
        break
    if started_with and any(started_with in t for t in log_lines(run["id"])):
        print(run["id"])
        sys.exit(0)
    time.sleep(5 if started_with else 10)
lines = log_lines(run["id"])
for text in lines[-20:]:
    print("   ", text)
print("run", run["id"], run["state"], run.get("reason") or "", "exit code", run.get("exit_code"))
text = "\n".join(lines)
expected = [e for e in os.environ.get("EXPECT", "").split("|") if e]
wrong = [e for e in expected if text.count(e) != 1] if os.environ.get("ONCE") else []
missing = [e for e in expected if e not in text]
if missing or wrong:
    print("not in the log:", missing, "not exactly once:", wrong)
sys.exit(0 if run["state"] == "FINISHED" and not (missing or wrong) and not started_with else 1)
PY
api_run() { MLBENCH_URL="$url" MLBENCH_TOKEN="$token" python3 "$run_script"; }

echo "== 5. a 2-worker run through the API"
RUN='{"name": "e2e-kind", "num_workers": 2, "num_cpus": 0.5, "max_bandwidth": 1000,
      "dataset": "synthetic", "light_target": true, "max_epochs": 1, "time_budget": 900, "time_limit": 1800}' \
EXPECT="" api_run

echo "== 6. an open-division run in image $custom on every rank"
# The worker image under another name: the same sshd and mpirun, so its pods get Ready.
command="python -c \\\"import socket; print('custom on', socket.gethostname())\\\""
RUN="{\"name\": \"e2e-custom\", \"num_workers\": 2, \"num_cpus\": 0.5, \"time_limit\": 900,
      \"custom_image_name\": \"$custom\", \"run_all_nodes\": true,
      \"custom_image_command\": \"$command\"}" \
EXPECT="custom on $release-mlbench-worker-0|custom on $release-mlbench-worker-1" api_run
image="$(kubectl get statefulset --namespace "$namespace" "$release-mlbench-worker" \
    -o jsonpath='{.spec.template.spec.containers[0].image}')"
[ "$image" = "mlbench/mlbench_worker:$tag" ] || {
    echo "the worker image after the custom run is $image, not the chart's" >&2; exit 1; }
kubectl rollout status --namespace "$namespace" "statefulset/$release-mlbench-worker" --timeout 10m

echo "== 7. a run that outlives a restart of the master"
command="python -c \\\"import time; print('before the restart', flush=True); time.sleep(150); print('after the restart')\\\""
run_id="$(RUN="{\"name\": \"e2e-reattach\", \"num_workers\": 2, \"num_cpus\": 0.5,
      \"time_limit\": 1200, \"custom_image_name\": \"$custom\",
      \"custom_image_command\": \"$command\"}" STARTED_WITH="before the restart" api_run)"
kubectl rollout restart --namespace "$namespace" "deployment/$release-mlbench-master"
kubectl rollout status --namespace "$namespace" "deployment/$release-mlbench-master" --timeout 10m
forward
RUN_ID="$run_id" ONCE=1 EXPECT="before the restart|after the restart" api_run
echo "== e2e-kind passed"
