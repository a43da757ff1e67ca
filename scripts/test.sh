#!/usr/bin/env bash
# Runs every test: builds the policy components (the integration tests load them), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-policies.sh
# The container image's build: the host without the simulator (`--no-default-features`) must compile.
cargo build --quiet -p wasp --no-default-features
cargo test --workspace "$@"
