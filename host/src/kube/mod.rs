//! Talking to the API server, shared by every loop of the host:
//!
//! - [`client`]: a kube client with its own retries off (each loop backs off by itself) and one budget of
//!   requests in flight for the whole process;
//! - [`identity`]: who this process is (its Pod, from the downward API, and an instance id for the Lease and
//!   events);
//! - [`events`]: an event recorder per loop (its own reporting component), with kube's aggregation and spam
//!   filter;
//! - [`leader`]: leader election on a Lease, judged by this process's own clock.

pub mod client;
pub mod events;
pub mod identity;
pub mod leader;

pub use client::ApiClient;
pub use events::{EventRecorder, ObjectRef};
pub use identity::HostIdentity;
