//! Hash maps for a policy's per-call work: keyed by short strings and ids, filled and probed thousands of times
//! per call. The standard library's SipHash, made to resist collisions crafted from untrusted input, was 40% of
//! inter-pod-affinity's instructions in the sandbox; FxHash (rustc-hash) takes a fraction of that, and less than
//! foldhash, whose 128-bit multiplications wasm32 emulates (`scripts/policy-instructions.sh`: 44.2, 30.2 and 23.2
//! million instructions per call with SipHash, foldhash and FxHash). Its seed is fixed, as the sandbox's SipHash
//! keys were: a map filled in the same order iterates in the same order from run to run (not across word sizes:
//! a native build may iterate otherwise), so a policy whose answer depends on a map's order should sort. Label
//! values crafted to collide could still slow a policy's maps down: its time limit bounds what that costs.

/// A `HashMap` with FxHash; made with `default()`.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
