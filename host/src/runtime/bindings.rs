//! Host bindings generated from `wit/policy.wit`, the one definition of the ABI.

wasmtime::component::bindgen!({
    world: "policy-component",
    path: "../wit",
    // The scheduler compares records to tell a real change from a status-only update; Serialize hands the
    // records to policies compiled natively (the scheduling benchmark's side-by-side run).
    additional_derives: [PartialEq, serde::Serialize],
});

pub use self::wasp::policy::types;

/// The contract this host implements; components must be built against a compatible `wasp:policy` version.
pub const CONTRACT_VERSION: &str = "0.1.0";
/// The interfaces every policy component exports (at [`CONTRACT_VERSION`]).
pub const EXPORTED_INTERFACES: [&str; 5] = ["policy", "filter", "score", "evict", "scale"];
