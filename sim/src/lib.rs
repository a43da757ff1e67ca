//! wasp-sim: a simulated Kubernetes API server for tests, benchmarks and trying policies, never a replacement for
//! a real one. It speaks the Kubernetes REST protocol (JSON over HTTP/1.1) so kube-rs and kubectl work unchanged.
//!
//! - [`store`]: objects, resource versions, watch history.
//! - [`api`] and [`subresources`]: the HTTP surface (discovery, verbs, watch, binding, eviction, status, scale).
//! - [`controllers`]: kubelet-like pod lifecycle, Deployment/ReplicaSet/StatefulSet and PDB status controllers.
//! - [`metrics`]: metrics.k8s.io, custom.metrics.k8s.io (pods and objects) and external.metrics.k8s.io from a
//!   load model.
//! - [`resources`]: the served types, and those CustomResourceDefinitions add.
//! - [`scenario`]: YAML scenarios and timed events; [`faults`]: injected errors, latency, dropped watches.
//! - [`openapi`]: `/openapi/v3` for kubectl's validation and `explain`; [`tables`]: server-side printing;
//!   [`events`]: the events.k8s.io/v1 view of core/v1 events.
//! - [`webhooks`]: admission webhooks (mutating, then validating) called on create.
//! - [`audit`]: a log of every answered request, as kube-apiserver's audit log.
//! - [`clock`]: the wall clock, tokio's (simulated time when paused).
//! - [`server`]: running it all on a loopback port, with a kubeconfig.

pub mod api;
pub mod audit;
pub mod auth;
pub mod clock;
pub mod controllers;
mod defaults;
pub mod error;
pub mod events;
pub mod faults;
pub mod metrics;
pub mod openapi;
mod pdb;
pub mod protobuf;
pub mod resources;
pub mod scenario;
pub mod selectors;
mod selectors_k8s;
pub mod server;
pub mod store;
pub mod subresources;
pub mod tables;
pub mod volumes;
pub mod webhooks;

pub use scenario::Scenario;
pub use server::{Simulator, SimulatorOptions};
