#!/usr/bin/env bash
# Runs every test: builds the policy components (the integration tests load them), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-policies.sh
# The container image's build: the host without the simulator (`--no-default-features`) must compile; a check
# finds what a build would, without generating code for a feature set no test runs.
cargo check --quiet -p wasp --no-default-features
cargo test --workspace "$@"
