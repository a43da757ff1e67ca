#!/usr/bin/env bash
# Builds every policy in plugins/ as a wasm32-wasip2 component into plugins/out/, and the test fixtures into
# target/wasm-fixtures/. Installs the wasm32-wasip2 target if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi

policies=()
for manifest in plugins/*/Cargo.toml; do
  policies+=("$(basename "$(dirname "$manifest")")")
done

packages=()
for name in "${policies[@]}" misbehaving zone-pin scaffolded; do packages+=(-p "$name"); done
cargo build --quiet --target wasm32-wasip2 --profile policy "${packages[@]}"

built="${CARGO_TARGET_DIR:-target}/wasm32-wasip2/policy"
mkdir -p plugins/out target/wasm-fixtures
for name in "${policies[@]}"; do
  cp "$built/${name//-/_}.wasm" "plugins/out/$name.wasm"
done
cp "$built/misbehaving.wasm" target/wasm-fixtures/misbehaving.wasm
# What `wasp policy new` writes, built as a user's policy would be.
cp "$built/scaffolded.wasm" target/wasm-fixtures/scaffolded.wasm
# Two versions of one policy that decide differently, for the hot reload tests and benchmark.
cp "$built/zone_pin.wasm" target/wasm-fixtures/zone-pin-east.wasm
cargo build --quiet --target wasm32-wasip2 --profile policy -p zone-pin --features west
cp "$built/zone_pin.wasm" target/wasm-fixtures/zone-pin-west.wasm
# A version of it that is a score, not a filter: refused where a profile uses it as a filter.
cargo build --quiet --target wasm32-wasip2 --profile policy -p zone-pin --features score-instead
cp "$built/zone_pin.wasm" target/wasm-fixtures/zone-pin-score.wasm
# Each component's size as built, and compressed as `wasp policy build` and the host's NAME.wasm.zst have it
# (the default set as one bundle is smaller still: `wasp configmap --from-dir plugins/out --bundle`).
for file in plugins/out/*.wasm target/wasm-fixtures/scaffolded.wasm; do
  if command -v zstd > /dev/null; then
    printf "  %-62s %7d bytes, %6d compressed\n" "$file" "$(wc -c < "$file")" "$(zstd -19 -q -c "$file" | wc -c)"
  else
    printf "  %-62s %7d bytes\n" "$file" "$(wc -c < "$file")"
  fi
done
