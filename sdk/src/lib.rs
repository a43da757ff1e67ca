//! # wasp-sdk
//!
//! Write wasp policies in Rust: filter and score nodes for the scheduler, propose evictions for the rescheduler,
//! recommend replica counts for the autoscaler. A policy is a plain Rust type implementing [`Policy`] and one or
//! more of [`Filter`], [`Score`], [`Evict`], [`Scale`]; [`export_policy!`] turns it into a `wasm32-wasip2`
//! component. The same code runs natively under `cargo test` with the builders in [`testing`].
//!
//! The host keeps each policy instance's [`Cluster`] current by sending deltas; the SDK applies them, so a policy
//! only ever sees a consistent view of nodes (and, if it asks for them, the pods bound to them).
//!
//! See `sdk/README.md` for a walk-through and `sdk/RATIONALE.md` for why the ABI looks the way it does.

extern crate self as wasp_sdk;

pub mod affinity;
pub mod allocation;
pub mod autoscaling;
pub mod cluster;
pub mod collections;
pub mod index;
pub mod matching;
pub mod policy;
pub mod quantity;
pub mod resources;
pub mod selection;
pub mod settings;
pub mod spread;
pub mod testing;
pub mod topology;
pub mod utilization;
pub mod vertical;

#[doc(hidden)]
pub mod guest;

/// Bindings generated from `wit/policy.wit`, the one definition of the ABI.
pub mod bindings {
    wit_bindgen::generate!({
        world: "policy-component",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_policy_component",
        default_bindings_module: "wasp_sdk::bindings",
        runtime_path: "wasp_sdk::__wit_bindgen::rt",
        // Deserialize decodes the deltas `apply` takes (postcard's encoding of the records: see RATIONALE, "0.9").
        additional_derives: [serde::Deserialize, PartialEq],
        // The records reach the guest only inside `apply`'s bytes, so no function signature names them.
        generate_unused_types: true,
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// The contract types: pods, nodes, resources, deltas, verdicts.
pub mod types {
    pub use crate::bindings::wasp::policy::types::*;
    // The contract's evict context carries only the time: pending and failed pods arrive as deltas (the pod
    // record is lifted in one place). Policies see them gathered here.
    pub use crate::policy::{EvictContext, FailedPod, PendingPod};
}

/// The contract version this SDK builds against (the `wasp:policy` WIT package version).
pub const CONTRACT_VERSION: &str = "0.10.0";

pub use cluster::{Cluster, LabelScope, NodeFacts, NodeInfo, PodFacts, PodInfo};
pub use policy::{Evict, Filter, NoSettings, Normalization, Policy, Scale, Score, Verdict};
pub use serde;
pub use serde_json;
pub use types::{NodeId, PodId, PolicyKind, ViewScope};
