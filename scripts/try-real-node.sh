#!/usr/bin/env bash
# Try wasp on a real node: builds what is missing (the control plane, the node programs, the policies, wasp's
# image from the release build), starts the control plane with one real node (kubelet, containerd, runc) and
# kube-scheduler in private namespaces, installs wasp as the README says, prints the kubeconfig to use, and
# tears it all down on Ctrl-C. Needs root (docs/real-nodes.md).
#
#   scripts/try-real-node.sh [--nodes N] [--binary PATH]     (--binary: a wasp build to put in the image)
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=1 binary=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --binary) binary=(--binary "$2"); shift 2 ;;
    *) echo "try-real-node.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "try-real-node.sh: real nodes need root" >&2; exit 1; }
[ -x target/controlplane/wasp-controlplane ] || ./scripts/build-controlplane.sh
[ -x target/node/kubelet ] || ./scripts/build-node.sh
[ -e plugins/out/policies.tar.zst ] || [ -n "$(ls plugins/out/*.wasm 2>/dev/null)" ] || ./scripts/build-policies.sh
./scripts/build-image.sh "${binary[@]}"
wasp="${binary[1]:-target/release/wasp}"
data=$(mktemp -d /tmp/wasp-real-node.XXXXXX)
# The kubelet's own sync period (1 min): what a ConfigMap update costs on a real cluster.
target/controlplane/wasp-controlplane --data-dir "$data" --real-nodes "$nodes" --kube-scheduler --image target/image/wasp.tar > "$data/controlplane.out" &
controlplane=$!
trap 'kill -TERM $controlplane 2>/dev/null; wait $controlplane; rm -rf "$data"; echo "torn down"' EXIT
trap 'exit 0' INT TERM
until grep -q '^ready in' "$data/controlplane.out" 2>/dev/null; do
  kill -0 $controlplane 2>/dev/null || { cat "$data/controlplane.out"; echo "the control plane stopped" >&2; exit 1; }
  sleep 0.5
done
cat "$data/controlplane.out"
export KUBECONFIG="$data/admin.kubeconfig"
kubectl apply -f manifests/ > /dev/null
"$wasp" configmap --from-dir plugins/out --bundle | kubectl create -f - > /dev/null
"$wasp" certs 2> "$data/certs.txt" | kubectl apply -f - > /dev/null
grep '^  kubectl patch' "$data/certs.txt" | sh > /dev/null
echo "wasp installed; waiting for its replicas to be Ready"
kubectl rollout status deployment/wasp-scheduler -n wasp-system --timeout=5m
sandbox=$(sed -n 's/^sandbox pid: //p' "$data/controlplane.out")
cat <<TEXT

export KUBECONFIG=$KUBECONFIG
kubectl get pods -A -o wide
kubectl apply -f manifests/examples/            # pods with schedulerName: wasp (image pulls: none, use imagePullPolicy Never)
nsenter -t $sandbox -m -n -- curl -k https://POD_IP:10259/healthz   # pod addresses, from inside the sandbox

Ctrl-C tears it all down.
TEXT
while kill -0 $controlplane 2>/dev/null; do sleep 1; done
