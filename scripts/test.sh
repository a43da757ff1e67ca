#!/usr/bin/env bash
# Runs every test: builds the policy components (the integration tests load them), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-policies.sh
# The container image's build: the host without the simulator (the Dockerfile's `--no-default-features
# --features jemalloc`, less the allocator) must compile. A build, not a check: its dependencies are the tests'
# own, compiled once for both (a cold `cargo check` compiles them a second time, metadata only: 12 minutes on the
# CI machine's kind of host, measured).
cargo build --quiet -p wasp --no-default-features
# Every test, with the simulator; without jemalloc, whose build from source costs minutes and which no test reads
# (so not the crate that only declares it either).
cargo test --workspace --exclude wasp-allocator --no-default-features --features wasp/sim "$@"
