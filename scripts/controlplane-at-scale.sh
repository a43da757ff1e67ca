#!/usr/bin/env bash
# The real control plane's memory with many nodes and pods: starts target/controlplane/wasp-controlplane, creates
# NODES nodes and PODS pods bound round-robin to them (kwok makes them Running and Ready), waits until every pod
# is Running, and prints the process's resident memory and its peak (VmHWM).
#   scripts/controlplane-at-scale.sh [NODES=5000] [PODS=10000] [explain]
# With `explain`: then runs `wasp run` (the shipped configuration and RBAC, as the README installs them; $WASP,
# default target/debug/wasp) on that cluster, gives it 2000 pods to place and one that fits nowhere, and times
# `wasp explain pod` (a new process each: kubeconfig, Lease, TLS, the leader's answer) and the leader's answer
# alone (GET /explain over HTTPS with the admin's client certificate), while it places the pods and after.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${1:-5000}
pods=${2:-10000}
mode=${3:-memory}
wasp=${WASP:-target/debug/wasp}
dir=$(mktemp -d)
host=
trap 'kill $controlplane $host 2>/dev/null; wait $controlplane $host 2>/dev/null; rm -rf "$dir"' EXIT
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
# Until none waits (the node lifecycle controller may delete a few bare pods of a node whose heartbeat came late
# under this load: they are not made again).
until [ "$(kubectl get pods --field-selector status.phase=Pending --no-headers 2>/dev/null | wc -l)" -eq 0 ]; do sleep 5; echo "  running: $(kubectl get pods --field-selector status.phase=Running --no-headers | wc -l)  $(memory)"; done
echo "all $(kubectl get pods --field-selector status.phase=Running --no-headers | wc -l) pods Running after $(( $(date +%s) - started )) s: $(memory)"
if [ "$mode" != explain ]; then
  sleep 30
  echo "30 s later (heartbeats, controllers): $(memory)"
  exit 0
fi

# wasp as the README installs it (the Deployment scaled to zero: it runs here), as the admin.
kubectl apply -f manifests/ > /dev/null
kubectl scale deployment wasp-scheduler -n wasp-system --replicas=0 > /dev/null
kubectl get configmap wasp-config -n wasp-system -o jsonpath='{.data.config\.yaml}' | sed "s|policyDir: /etc/wasp/policies|policyDir: $PWD/plugins/out|" > "$dir/config.yaml"
"$wasp" run --config "$dir/config.yaml" --cache-dir "$dir/cache" --listen 127.0.0.1:10259 > "$dir/wasp.log" 2>&1 &
host=$!
until curl -ks https://127.0.0.1:10259/readyz | grep -q ok; do sleep 1; kill -0 $host; done
until [ -n "$(kubectl get lease wasp-scheduler -n wasp-system -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)" ]; do sleep 1; done
echo "wasp leads: $(awk '/VmRSS|VmHWM/ {printf "%s %d MiB  ", $1, $2/1024}' /proc/$host/status)"
kubectl run big -n default --image=nginx --overrides='{"spec":{"schedulerName":"wasp","containers":[{"name":"big","image":"nginx","resources":{"requests":{"cpu":"64"}}}]}}' > /dev/null
until kubectl get pod big -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}' | grep -q Unschedulable; do sleep 1; done
kubectl create deployment placed --image=nginx --replicas=2000 --dry-run=client -o json \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d["spec"]["template"]["spec"]; s["schedulerName"]="wasp"; s["containers"][0]["resources"]={"requests":{"cpu":"100m","memory":"64Mi"}}; print(json.dumps(d))' \
  | kubectl create -f - > /dev/null
# The admin's client certificate, for the leader's endpoint alone.
python3 - "$KUBECONFIG" "$dir" <<'PY'
import base64, sys, yaml
user = yaml.safe_load(open(sys.argv[1]))["users"][0]["user"]
for key, name in [("client-certificate-data", "admin.crt"), ("client-key-data", "admin.key")]:
    open(f"{sys.argv[2]}/{name}", "wb").write(base64.b64decode(user[key]))
PY
# Milliseconds of N runs of a command: median, 90th percentile, max.
timed() {
  local runs=$1; shift
  for _ in $(seq "$runs"); do
    local begun=$(date +%s%N)
    "$@" > /dev/null
    echo $(( ($(date +%s%N) - begun) / 1000000 ))
  done | sort -n | awk '{v[NR]=$1} END {printf "median %d ms, p90 %d ms, max %d ms (%d runs)", v[int((NR+1)/2)], v[int(NR*0.9+0.5)], v[NR], NR}'
}
leader_answer() { curl -ksf --cert "$dir/admin.crt" --key "$dir/admin.key" https://127.0.0.1:10259/explain/pods/default/big; }
echo "while 2000 pods are placed: wasp explain pod default/big: $(timed 10 "$wasp" explain pod default/big)"
echo "  the leader's answer alone: $(timed 50 leader_answer)"
until [ "$(kubectl get deployment placed -o jsonpath='{.status.availableReplicas}')" = 2000 ]; do sleep 2; done
echo "2000 pods placed and Available"
echo "after: wasp explain pod default/big: $(timed 20 "$wasp" explain pod default/big)"
echo "  the leader's answer alone: $(timed 100 leader_answer)"
"$wasp" explain pod default/big | head -3
