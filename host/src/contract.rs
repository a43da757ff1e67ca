//! The contract as the host sees it: bindings generated from `wit/policy.wit` (the one definition of the ABI),
//! its version, and the names the host prints for its enums. Every layer (runtime, cluster, policy, loops) takes
//! its domain types from here, so none of them depends on another for them.

wasmtime::component::bindgen!({
    world: "policy-component",
    path: "../wit",
    // The scheduler compares records to tell a real change from a status-only update; Serialize hands the
    // records to policies compiled natively (the scheduling benchmark's side-by-side run).
    additional_derives: [PartialEq, serde::Serialize],
});

pub use self::wasp::policy::types;
use types::{PolicyKind, ViewScope};

/// The contract this host implements; components must be built against a compatible `wasp:policy` version.
pub const CONTRACT_VERSION: &str = "0.4.0";
/// The interfaces every policy component exports (at [`CONTRACT_VERSION`]).
pub const EXPORTED_INTERFACES: [&str; 5] = ["policy", "filter", "score", "evict", "scale"];

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
