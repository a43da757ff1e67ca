#!/usr/bin/env bash
# Instructions per call of one scheduling policy (inter-pod-affinity unless named), in the sandbox and compiled
# natively, over the fixed workload of host/benches/policy_instructions.rs (scheduler_perf's anti-affinity
# cluster), counted by valgrind's callgrind. Wall time on this shared machine moves by a third from run to run;
# these counts decide whether a change to a policy, the SDK or the host's calls helps.
#   scripts/policy-instructions.sh [POLICY [--nodes N] [--pods M] [--calls K]]
# After scripts/build-policies.sh. Callgrind's files stay in target/callgrind/ for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
policy=${1:-inter-pod-affinity}
shift || true
command -v valgrind > /dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
# The features of the side-by-side runs: no jemalloc (both builds share the process's allocator anyway).
binary=$(cargo bench -p wasp --no-default-features --features sim --bench policy_instructions --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*policy_instructions-[0-9a-f]*\)).*/\1/p' | tail -1)
[[ -x "$binary" ]] || { echo "building the policy_instructions benchmark failed" >&2; exit 1; }
# Outside valgrind first: the component is compiled into the cache once (cranelift under valgrind takes minutes).
"$binary" --policy "$policy" --calls 1 "$@" > /dev/null
mkdir -p target/callgrind
declare -A per_call
for build in wasm native; do
  flags=()
  [[ $build == native ]] && flags=(--native)
  out=target/callgrind/$policy.$build.out
  summary=$(valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*policy_instructions::measured*' \
    "$binary" --policy "$policy" "${flags[@]}" "$@" 2> "target/callgrind/$policy.$build.log")
  calls=$(sed -n 's/.*: \([0-9]*\) calls of filter.*/\1/p' <<< "$summary")
  instructions=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out")
  per_call[$build]=$(( instructions / calls ))
  echo "$build: $summary"
  echo "$build: $(printf "%'d" "${per_call[$build]}") instructions per filter+score call ($(printf "%'d" "$instructions") in $calls calls)"
done
python3 -c "print(f'wasm/native: {${per_call[wasm]} / ${per_call[native]}:.2f}x the instructions')"
