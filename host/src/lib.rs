//! wasp: a WebAssembly policy host for Kubernetes.
//!
//! - [`contract`]: the ABI's types (generated from `wit/policy.wit`) and their names.
//! - [`runtime`]: the wasmtime engine, sandbox limits and policy instances.
//! - [`policy`]: loading and validating policy components, and calling them with their failure mode.
//! - [`config`]: the host's configuration file, validated as a whole.
//! - [`registry`]: which policy versions and plans serve every loop now; reloads and swaps them when files change.
//! - [`cluster`]: the shared view of nodes and pods, its informers and events, and the deltas that keep every
//!   policy instance current.
//! - [`kube`]: the API client, identity, event recorders and leader election every loop shares.
//! - [`serve`]: `/metrics`, `/healthz`, `/readyz`, `/policies`.
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
pub mod cluster;
pub mod config;
pub mod contract;
pub mod host;
pub mod kube;
pub mod policy;
pub mod registry;
pub mod rescheduler;
pub mod runtime;
pub mod scheduler;
pub mod serve;
pub mod shrink;

/// The `wasp` binary's allocator, for the binary and the benchmarks that report its memory: jemalloc, which
/// returns what bursts freed (a 50k-pod list, compiling a policy, a rescheduler fork) where glibc's per-thread
/// arenas kept it. Freed pages go back after a second, by a background thread, rather than jemalloc's default
/// ten seconds at the next allocation: at 5000 nodes and 50k pods that is 530 -> 480 MiB resident.
#[macro_export]
macro_rules! binary_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

        /// jemalloc's `malloc_conf` (tikv-jemalloc-sys prefixes its symbols); `_RJEM_MALLOC_CONF` overrides it.
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
    };
}
