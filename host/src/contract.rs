//! The contract as the host sees it: bindings generated from `wit/policy.wit` (the one definition of the ABI),
//! its version, and the names the host prints for its enums. Every layer (runtime, cluster, policy, loops) takes
//! its domain types from here, so none of them depends on another for them.

wasmtime::component::bindgen!({
    world: "policy-component",
    path: "../wit",
    // The scheduler compares records to tell a real change from a status-only update; Serialize encodes the
    // deltas `apply` sends ([`encode_deltas`]).
    additional_derives: [PartialEq, serde::Serialize],
});

/// The bytes `apply` takes: the deltas as a `list<cluster-delta>` in postcard's encoding, which the SDK decodes
/// into the same records generated from the same WIT (see RATIONALE, "0.9").
pub fn encode_deltas(deltas: &[ClusterDelta]) -> Vec<u8> {
    postcard::to_allocvec(deltas).expect("contract records always encode")
}

pub use self::wasp::policy::types;
use types::{ClusterDelta, Pod, PodId, PodPlace, PolicyKind, ViewScope};

/// The contract this host implements; components must be built against a compatible `wasp:policy` version.
pub const CONTRACT_VERSION: &str = "0.10.0";
/// The interfaces every policy component exports (at [`CONTRACT_VERSION`]).
pub const EXPORTED_INTERFACES: [&str; 5] = ["policy", "filter", "score", "evict", "scale"];

/// What an evict call is about: the time, and the pods a policy may act for or on besides its view. The
/// contract sends the pods as deltas just before the call (`pod-upsert` with places `pending` and `failed`), so
/// that the pod record is lifted in one place in a component; the call itself carries only the time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictContext {
    /// Seconds since the Unix epoch.
    pub now: i64,
    /// Pods of wasp profiles waiting for room, highest priority first.
    pub pending: Vec<PendingPod>,
    /// Pods in phase Failed still on a node, with ids from the view's sequence.
    pub failed: Vec<FailedPod>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PendingPod {
    pub pod: Pod,
    /// Why the scheduler could not place it; empty when it has not been tried yet.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FailedPod {
    pub id: PodId,
    pub node: String,
    pub pod: Pod,
}

impl EvictContext {
    /// The deltas that carry the context's pods, in order (pending pods keep their priority order).
    pub fn deltas(&self) -> Vec<ClusterDelta> {
        let pending = self.pending.iter().map(|pending| ClusterDelta::PodUpsert((0, PodPlace::Pending(pending.reason.clone()), pending.pod.clone())));
        let failed = self.failed.iter().map(|failed| ClusterDelta::PodUpsert((failed.id, PodPlace::Failed(failed.node.clone()), failed.pod.clone())));
        pending.chain(failed).collect()
    }
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 4] = [PolicyKind::Filter, PolicyKind::Score, PolicyKind::Evict, PolicyKind::Scale];

    /// The name used in configuration, logs and `/policies`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Filter => "filter",
            PolicyKind::Score => "score",
            PolicyKind::Evict => "evict",
            PolicyKind::Scale => "scale",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl ViewScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ViewScope::Nodes => "nodes",
            ViewScope::NodesAndPods => "nodes-and-pods",
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_is_the_wit_package_version() {
        let wit = include_str!("../../wit/policy.wit");
        let package = wit.lines().find(|line| line.starts_with("package ")).expect("a package line");
        assert_eq!(package.trim(), format!("package wasp:policy@{};", super::CONTRACT_VERSION));
        assert_eq!(super::CONTRACT_VERSION, wasp_sdk::CONTRACT_VERSION, "host and SDK implement the same contract");
    }
}
