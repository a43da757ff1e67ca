#!/usr/bin/env bash
# Instructions per call of one scheduling policy (inter-pod-affinity unless named), in the sandbox and compiled
# natively, over the fixed workload of host/benches/policy_instructions.rs (scheduler_perf's anti-affinity
# cluster, or `--workload topology-spreading`), counted by valgrind's callgrind. Wall time on this shared machine moves by a third from run to run;
# these counts decide whether a change to a policy, the SDK or the host's calls helps.
#   scripts/policy-instructions.sh [POLICY [--nodes N] [--pods M] [--calls K] [--workload NAME]]
# After scripts/build-policies.sh. Callgrind's files stay in target/callgrind/ for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
policy=inter-pod-affinity
if [[ $# -gt 0 && $1 != --* ]]; then
  policy=$1
  shift
fi
command -v valgrind > /dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
mkdir -p target/callgrind
# The features of the side-by-side runs: no jemalloc (both builds share the process's allocator anyway).
cargo bench -p wasp --no-default-features --features sim --bench policy_instructions --no-run > target/callgrind/build.log 2>&1 \
  || { cat target/callgrind/build.log >&2; echo "building the policy_instructions benchmark failed" >&2; exit 1; }
binary=$(sed -n 's/.*Executable .*(\(.*policy_instructions-[0-9a-f]*\)).*/\1/p' target/callgrind/build.log | tail -1)
[[ -x "$binary" ]] || { echo "no policy_instructions binary named in target/callgrind/build.log" >&2; exit 1; }
# Outside valgrind first: the component is compiled into the cache once (cranelift under valgrind takes minutes).
"$binary" --policy "$policy" --calls 1 "$@" > /dev/null
# Callgrind's files are named by policy and workload.
workload=anti-affinity
previous=
for arg in "$@"; do
  [[ $previous == --workload ]] && workload=$arg
  previous=$arg
done
declare -A per_call
for build in wasm native; do
  flags=(--policy "$policy")
  [[ $build == native ]] && flags+=(--native)
  out=target/callgrind/$policy.$workload.$build.out
  log=target/callgrind/$policy.$workload.$build.log
  summary=$(valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*policy_instructions::measured*' \
    "$binary" "${flags[@]}" "$@" 2> "$log") || { echo "valgrind failed: see $log" >&2; exit 1; }
  calls=$(sed -n 's/.*: \([0-9]*\) calls of filter.*/\1/p' <<< "$summary")
  instructions=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out")
  [[ -n $calls && -n $instructions && $calls -gt 0 ]] || { echo "no count in $out or in the output: $summary" >&2; exit 1; }
  per_call[$build]=$(( instructions / calls ))
  echo "$build: $summary"
  echo "$build: ${per_call[$build]} instructions per call ($instructions in $calls calls)"
done
python3 -c "print(f'wasm/native: {${per_call[wasm]} / ${per_call[native]}:.2f}x the instructions')"
