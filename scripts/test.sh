#!/usr/bin/env bash
# Runs every test: builds the policy components (the integration tests load them), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-policies.sh
cargo test --workspace "$@"
