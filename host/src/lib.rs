//! wasp: a WebAssembly policy host for Kubernetes.
//!
//! - [`contract`]: the ABI's types (generated from `wit/policy.wit`) and their names.
//! - [`runtime`]: the wasmtime engine, sandbox limits and policy instances.
//! - [`policy`]: loading and validating policy components, and calling them with their failure mode.
//! - [`config`]: the host's configuration file, validated as a whole.
//! - [`registry`]: which policy versions and plans serve every loop now; reloads and swaps them when files change.
//! - [`cluster`]: the shared view of nodes and pods, its informers and events, and the deltas that keep every
//!   policy instance current.
//! - [`clock`]: the wall clock, the simulated cluster's under `wasp simulate`.
//! - [`kube`]: the API client, identity, event recorders and leader election every loop shares.
//! - [`oci`]: policies pushed to and pulled from OCI registries, with signatures attached as cosign attaches them.
//! - [`serve`]: `/metrics`, `/healthz`, `/readyz`, `/policies`, `/explain`.
//! - [`explain`]: the loops' decision records, bounded, and how `wasp explain` reads and prints them.
//! - [`scheduler`]: named scheduler profiles driven by filter and score policies.
//! - [`rescheduler`]: evict policies inside a safety envelope; evictions through the Eviction API.
//! - [`admission`]: webhooks that refuse pods naming a scheduler nobody runs and give pods their namespace's
//!   scheduler; stray pods reported.
//! - [`autoscaler`]: `Autoscaler` resources scaled by scale policies inside the HPA's behavior rules.
//! - [`host`]: the loops on their shared ground, as `wasp run` starts them.
//! - [`cli`]: the `wasp` command line.

pub mod admission;
pub mod autoscaler;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod contract;
pub mod explain;
pub mod host;
pub mod kube;
pub mod oci;
pub mod policy;
pub mod registry;
pub mod rescheduler;
pub mod runtime;
pub mod scheduler;
pub mod serve;
pub mod shrink;
pub mod text;
