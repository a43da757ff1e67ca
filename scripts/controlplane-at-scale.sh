#!/usr/bin/env bash
# The real control plane's memory with many nodes and pods: starts target/controlplane/wasp-controlplane, creates
# NODES nodes and PODS pods bound round-robin to them (kwok makes them Running and Ready), waits until every pod
# is Running, and prints the process's resident memory and its peak (VmHWM).
#   scripts/controlplane-at-scale.sh [NODES=5000] [PODS=10000]
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${1:-5000}
pods=${2:-10000}
dir=$(mktemp -d)
trap 'kill $controlplane 2>/dev/null; wait $controlplane 2>/dev/null; rm -rf "$dir"' EXIT
target/controlplane/wasp-controlplane --data-dir "$dir/data" > "$dir/out" 2>&1 &
controlplane=$!
until grep -q '^ready in' "$dir/out"; do sleep 0.2; kill -0 $controlplane; done
export KUBECONFIG="$dir/data/admin.kubeconfig"
# Creates the objects of the four files $1-N.json at once (kubectl creates a List's items one by one).
create_all() {
  local creators=()
  for part in 0 1 2 3; do kubectl create -f "$dir/$1-$part.json" > /dev/null & creators+=($!); done
  for creator in "${creators[@]}"; do wait "$creator"; done
}
memory() { awk '/VmRSS|VmHWM/ {printf "%s %d MiB  ", $1, $2/1024}' /proc/$controlplane/status; echo; }
echo "started: $(memory)"
python3 - "$nodes" "$pods" "$dir" <<'PY'
import json, sys
nodes, pods, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def write(name, items):
    # Four files each, created by four kubectl processes at once.
    for part in range(4):
        with open(f"{out}/{name}-{part}.json", "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": items[part::4]}, f)
write("nodes", [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n-{i}", "labels": {"kubernetes.io/hostname": f"n-{i}", "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
                 "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}, "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"}}} for i in range(nodes)])
write("pods", [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}", "namespace": "default", "labels": {"app": f"app-{i % 50}"}},
                "spec": {"nodeName": f"n-{i % nodes}", "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}} for i in range(pods)])
PY
started=$(date +%s)
create_all nodes
echo "$nodes nodes created in $(( $(date +%s) - started )) s: $(memory)"
started=$(date +%s)
create_all pods
echo "$pods pods created in $(( $(date +%s) - started )) s: $(memory)"
until [ "$(kubectl get pods --field-selector status.phase=Running --no-headers 2>/dev/null | wc -l)" -ge "$pods" ]; do sleep 5; echo "  running: $(kubectl get pods --field-selector status.phase=Running --no-headers | wc -l)  $(memory)"; done
echo "all $pods pods Running after $(( $(date +%s) - started )) s: $(memory)"
sleep 30
echo "30 s later (heartbeats, controllers): $(memory)"
