//! The sandbox: one wasmtime [`Engine`](wasmtime::Engine) with epoch interruption, compiled components cached in
//! memory and on disk, and [`PolicyInstance`]s that each run under a deadline and a memory cap with an empty WASI
//! context (no files, network, environment or sockets); all instances together within one [`GuestMemory`] budget.

pub mod answers;
mod cache;
mod compiler;
mod engine;
mod guest_memory;
mod guest_output;
mod instance;
mod limits;

pub use cache::CacheOutcome;
pub use compiler::{compile_policy_child, CompileLimits, Compiler};
pub use engine::Runtime;
pub use guest_memory::{budget_for_container, container_memory_limit, GuestMemory};
pub use instance::{CallError, InstanceState, PolicyInstance};
pub use limits::Limits;

/// Runs `work`, which calls into guests, off the async worker threads: a guest's WASI calls (its stdout, say)
/// block on the ambient tokio runtime, which panics on an async worker thread. On a multi-threaded runtime the
/// worker hands its other tasks over (`block_in_place`); on a current-thread runtime, where that panics, the work
/// runs on a scoped thread.
pub fn off_async_worker<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => {
            let now = tokio::time::Instant::now();
            std::thread::scope(|scope| {
                scope.spawn(move || crate::clock::standing_at(now, work)).join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
        }
        Err(_) => work(),
    }
}
