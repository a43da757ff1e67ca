#!/usr/bin/env bash
# Resident memory of `wasp run` (scheduler, rescheduler, autoscaler) with the shipped configuration
# (manifests/20-config.yaml, rescheduling every 20 s instead of 5 min) against `wasp sim serve` with 5000 nodes
# and 50k pending pods, which it schedules. Prints, every 10 s: resident memory, the guest memory of every policy
# (sum of wasp_policy_memory_bytes), pods scheduled and rescheduler runs; then the peak resident memory, each
# policy's share, and what each rescheduling run took (its log line's took_ms).
#
# Usage: scripts/memory-at-scale.sh [NODES] [PODS] [SECONDS]   (after scripts/build-policies.sh;
# builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${1:-5000}
pods=${2:-50000}
seconds=${3:-150}
cargo build --release -q -p wasp
wasp="$PWD/target/release/wasp"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

cat > "$work/scenario.yaml" <<EOF
kubelet: {readyDelay: 1s}
nodeGroups: [{name: n, count: $nodes, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}]
workloads: [{name: p, kind: Pods, replicas: $pods, schedulerName: wasp, cpu: 100m, memory: 128Mi}]
EOF
# The configuration the manifests ship, with this checkout's policies.
sed -n '/config.yaml: |/,$p' manifests/20-config.yaml | tail -n +2 | sed 's/^    //' \
  | sed "s|policyDir: /etc/wasp/policies|policyDir: $PWD/plugins/out|; s|interval: 5m|interval: 20s|" > "$work/config.yaml"

"$wasp" sim serve --scenario "$work/scenario.yaml" --address 127.0.0.1:0 --kubeconfig "$work/kubeconfig" > "$work/sim.log" 2>&1 &
until grep -q "serving on" "$work/sim.log"; do sleep 0.2; done # poll interval of the condition wait
KUBECONFIG="$work/kubeconfig" "$wasp" run --config "$work/config.yaml" --no-leader-election --listen 127.0.0.1:0 > "$work/wasp.log" 2>&1 &
host=$!
until address=$(sed 's/\x1b\[[0-9;]*m//g' "$work/wasp.log" | grep -o 'serving /metrics.* address=[0-9.:]*' | grep -o '[0-9.]*:[0-9]*$'); do sleep 0.2; done # poll interval of the condition wait

metric() { curl -s "http://$address/metrics" | awk -v name="$1" 'index($0, name) == 1 { sum += $NF } END { print sum + 0 }'; }
echo "wasp run, shipped configuration, $nodes nodes, $pods pods   ($(date -u +%F), $(git rev-parse --short HEAD))"
printf '%6s %12s %14s %10s %12s\n' time resident guest_memory scheduled resched_runs
for ((elapsed = 10; elapsed <= seconds; elapsed += 10)); do
  sleep 10
  resident=$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' /proc/$host/status)
  printf '%5ss %8s MiB %10.0f MiB %10s %12s\n' $elapsed "$resident" "$(metric wasp_policy_memory_bytes | awk '{ print $1 / 1048576 }')" \
    "$(metric 'wasp_schedule_attempts_total{profile="wasp",result="scheduled"}')" "$(metric wasp_rescheduler_run_duration_seconds_count)"
done
# The samples above can miss a short peak; the kernel keeps the highest resident size the process reached.
awk '/VmHWM/ { printf "peak resident memory (VmHWM) over the whole run: %.0f MiB\n", $2 / 1024 }' /proc/$host/status
echo "guest memory by policy (MiB):"
curl -s "http://$address/metrics" | awk '/^wasp_policy_memory_bytes/ { printf "  %-60s %6.1f\n", $1, $2 / 1048576 }' | sort -k2 -n -r
echo "rescheduling runs (each: plan with the shipped strategies, fit check, evictions):"
sed 's/\x1b\[[0-9;]*m//g' "$work/wasp.log" | grep 'rescheduling run ' | grep -o 'candidates=[0-9]*\|took_ms=[0-9]*' | paste -d' ' - - | sed 's/^/  /'
