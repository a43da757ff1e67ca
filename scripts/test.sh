#!/usr/bin/env bash
# Runs every test: builds the policy components (the integration tests load them), the real control plane
# (tests/real_cluster.rs runs wasp on it) and the real nodes' programs (tests/real_node.rs), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target
# Formatting first, as rustfmt.toml says (seconds). tests/fixtures/scaffolded is what `wasp policy new` writes,
# compared byte for byte with it by a test, and left as written.
git ls-files '*.rs' | grep -v '^tests/fixtures/scaffolded/' | xargs rustfmt --check --edition 2021
# The real control plane for tests/real_cluster.rs and the real nodes' programs for tests/real_node.rs (kubelet,
# containerd, runc, the CNI plugins), built beside the Rust build: each leaves cores idle at times (linking, the
# last crates of a dependency chain) that the other uses.
(./scripts/build-controlplane.sh && ./scripts/build-node.sh) > target/build-controlplane.log 2>&1 &
controlplane_build=$!
./scripts/build-policies.sh
# The container image's build: the host without the simulator (the Dockerfile's `--no-default-features
# --features jemalloc`, less the allocator) must compile. A build, not a check: its dependencies are the tests'
# own, compiled once for both (a cold `cargo check` compiles them a second time, metadata only: 12 minutes on the
# CI machine's kind of host, measured).
cargo build --quiet -p wasp --no-default-features
# Clippy, warnings as errors (clippy.toml), on every target the tests build and every bench (`--bench '*'` takes the
# `bench = false` ones `--all-targets` skips), while the Go build may still run.
cargo clippy --quiet --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --all-targets --bench '*' -- -D warnings
if ! wait "$controlplane_build"; then
  cat target/build-controlplane.log
  echo "building the control plane failed" >&2
  exit 1
fi
# Every test, with the simulator; without jemalloc, whose build from source costs minutes and which no test reads
# (so not the crate that only declares it either). Every test binary runs even after one fails, so a CI log names every failure.
cargo test --workspace --no-fail-fast --exclude wasp-allocator --no-default-features --features wasp/sim "$@"
# The side-by-side benchmark's smoke version (100 nodes, the test profile): kube-scheduler and wasp on a real
# control plane, every binding checked with kube-scheduler's filter plugins. It proves the harness still works;
# its figures are not the benchmark's (docs/performance.md, "Side by side with kube-scheduler").
cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --bench side_by_side -- --nodes 100
# The instruction-count workload (scripts/policy-instructions.sh) on a small cluster: the sandboxed and native
# builds of two filters that see pods, a filter and two scores give the same verdicts and scores.
for policy in inter-pod-affinity resources-fit least-allocated balanced-allocation; do
  cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --bench policy_instructions -- --compare --policy "$policy" --nodes 300 --pods 200
done
cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --bench policy_instructions -- --compare --policy pod-topology-spread --workload topology-spreading --nodes 300 --pods 200
# The autoscaling side by side's smoke version (a 1 s sync period: the trace in 44 s per autoscaler): the HPA
# controller, wasp's hpa and wasp's predictive on the same load; it fails if one of them does not follow the load.
cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --bench autoscaling_side_by_side -- --sync-period 1
# The rescheduling side by side's smoke version (2 s intervals, two of its cases): the descheduler and wasp's
# rescheduler on the same cluster states; it fails on a pod left Pending or a state the descheduler ignores.
cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim --bench rescheduling_side_by_side -- --interval 2 --case LowNodeUtilization --case TooBigToMove
