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
KUBECONFIG="$work/kubeconfig" "$wasp" run --config "$work/config.yaml" --no-leader-election --listen 127.0.0.1:0 --insecure-listen 127.0.0.1:0 > "$work/wasp.log" 2>&1 &
host=$!
until address=$(sed 's/\x1b\[[0-9;]*m//g' "$work/wasp.log" | grep -o 'over plain HTTP.* address=[0-9.:]*' | grep -o '[0-9.]*:[0-9]*$'); do sleep 0.2; done # poll interval of the condition wait

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
# What the resident memory is now, by kind of mapping. wasmtime reserves gigabytes for each guest memory and
# makes its used part readable: a read-write mapping followed by the inaccessible rest of the reservation.
# Compiled code is anonymous and executable; the rest of the anonymous memory is the host's heap (jemalloc) and
# thread stacks.
python3 - "$host" <<'PY'
import sys
mappings = []
for line in open(f"/proc/{sys.argv[1]}/smaps"):
    fields = line.split()
    if "-" in fields[0] and len(fields) >= 5:
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        mappings.append({"low": low, "high": high, "perms": fields[1], "path": fields[5] if len(fields) > 5 else "", "rss": 0})
    elif fields[0] == "Rss:":
        mappings[-1]["rss"] += int(fields[1])
rss = {}
for mapping, following in zip(mappings, mappings[1:] + [None]):
    path, perms = mapping["path"], mapping["perms"]
    if path.endswith("/wasp"): kind = "the wasp binary"
    elif path and not path.startswith("["): kind = "other files"
    elif "x" in perms: kind = "compiled policy code"
    elif following and following["low"] == mapping["high"] and following["perms"].startswith("---") \
            and not following["path"] and following["high"] - following["low"] >= 1 << 30: kind = "guest memories"
    else: kind = "host heap and stacks"
    rss[kind] = rss.get(kind, 0) + mapping["rss"]
print("resident memory now, by mapping (MiB):")
for kind, kib in sorted(rss.items(), key=lambda item: -item[1]):
    print(f"  {kind:<24} {kib / 1024:8.1f}")
PY
echo "guest memory by policy (MiB):"
curl -s "http://$address/metrics" | awk '/^wasp_policy_memory_bytes/ { printf "  %-60s %6.1f\n", $1, $2 / 1048576 }' | sort -k2 -n -r
echo "rescheduling runs (each: plan with the shipped strategies, fit check, evictions):"
sed 's/\x1b\[[0-9;]*m//g' "$work/wasp.log" | grep 'rescheduling run ' | grep -o 'candidates=[0-9]*\|took_ms=[0-9]*' | paste -d' ' - - | sed 's/^/  /'
