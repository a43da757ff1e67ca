#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets: quantities, label selectors, the host configuration, policy bundles,
# AdmissionReview bodies) with cargo fuzz for SECONDS each (default 60), from the seeds in fuzz/seeds and the
# corpus earlier runs grew in fuzz/corpus. A crash stops the run; its input is kept in fuzz/artifacts/TARGET/
# (replay: cargo +nightly fuzz run TARGET FILE) and belongs in a regression test of the module that crashed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]
#
# Needs the nightly toolchain (libFuzzer's instrumentation) and cargo-fuzz; both are installed when missing. The
# first build is slow (the host and its dependencies, instrumented, in fuzz/target); later ones are incremental.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
shift || true
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  echo "fuzzing $target for ${seconds}s"
  # 2 GiB of memory and 10 s per input: a bundle may unpack to 256 MiB, nothing may take seconds.
  cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
done
