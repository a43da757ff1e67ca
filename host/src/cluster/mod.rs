//! The host's view of the cluster: Kubernetes objects converted to contract records ([`convert`]), nodes and bound
//! pods with usage totals, and the delta log that keeps every policy instance's own view current
//! ([`ClusterState`]).

pub mod convert;
pub mod manifests;
mod state;

pub use state::{ClusterState, DeltaSink};
