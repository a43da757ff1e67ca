//! wasp: a WebAssembly policy host for Kubernetes.
//!
//! - [`runtime`]: the wasmtime engine, sandbox limits and policy instances.
//! - [`policy`]: loading and validating policy components, and calling them with their failure mode.
//! - [`registry`]: which policy versions and profiles serve now; reloads and swaps them when files change.
//! - [`cluster`]: the host's view of nodes and pods, and the deltas that keep every policy instance current.
//! - [`scheduler`]: named scheduler profiles driven by filter and score policies.
//! - [`cli`]: the `wasp` command line.

pub mod cli;
pub mod cluster;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod scheduler;
