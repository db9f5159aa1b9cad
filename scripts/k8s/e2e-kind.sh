#!/bin/bash
# make e2e-kind: the whole Kubernetes path on a throwaway kind cluster.
#   1. create a kind cluster (one control plane, two worker nodes)
#   2. build both images and load them into the cluster's nodes
#   3. helm install charts/mlbench (images from step 2, small CPU limits)
#   4. one 2-worker run of the default benchmark through the REST API (synthetic data,
#      one short epoch) that must end FINISHED
#   5. delete the cluster (KEEP_CLUSTER=1 keeps it for a look around)
# Needs docker (with a running engine), kind, kubectl, helm (3.8+), curl, python3.
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
docker build -f Dockerfile.master -t "mlbench/mlbench_master:$tag" .
docker build -f Dockerfile.worker -t "mlbench/mlbench_worker:$tag" .
kind load docker-image --name "$cluster" "mlbench/mlbench_master:$tag" "mlbench/mlbench_worker:$tag"

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
kubectl port-forward --namespace "$namespace" "svc/$release-mlbench-master" "$port:80" >/dev/null &
forward_pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 60); do
    curl -fsS "$url/api/health/" >/dev/null 2>&1 && break
    sleep 2
done
curl -fsS "$url/api/health/"; echo

echo "== 4. a 2-worker run through the API"
MLBENCH_URL="$url" MLBENCH_TOKEN="$token" python3 - <<'PY'
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

pods = call("GET", "/api/pods/")
print("workers:", [(p["name"], p["phase"]) for p in pods])
run = call("POST", "/api/runs/", {
    "name": "e2e-kind", "num_workers": 2, "num_cpus": 0.5, "max_bandwidth": 1000,
    "dataset": "synthetic", "light_target": True, "max_epochs": 1, "time_limit": 1800,
})
print("run", run["id"], run["state"])
deadline = time.monotonic() + 1800
while time.monotonic() < deadline:
    run = call("GET", f"/api/runs/{run['id']}/")
    if run["state"] in ("FINISHED", "FAILED", "CANCELLED"):
        break
    time.sleep(10)
tail, offset = [], 0
while True:  # the log, page by page; the last lines are shown
    page = call("GET", f"/api/runs/{run['id']}/logs/?offset={offset}")
    tail = (tail + [c["text"].rstrip() for c in page["chunks"]])[-20:]
    if not page["chunks"] or page["next_offset"] == offset:
        break
    offset = page["next_offset"]
for text in tail:
    print("   ", text)
print("run", run["id"], run["state"], run.get("reason") or "", "exit code", run.get("exit_code"))
sys.exit(0 if run["state"] == "FINISHED" else 1)
PY
echo "== e2e-kind passed"
