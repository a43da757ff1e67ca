//! The sandbox: one wasmtime [`Engine`](wasmtime::Engine) with epoch interruption, compiled components cached in
//! memory and on disk, and [`PolicyInstance`]s that each run under a deadline and a memory cap with an empty WASI
//! context (no files, network, environment or sockets).

pub mod bindings;
mod cache;
mod engine;
mod guest_output;
mod instance;
mod limits;

pub use cache::CacheOutcome;
pub use engine::Runtime;
pub use instance::{CallError, InstanceState, PolicyInstance};
pub use limits::Limits;
