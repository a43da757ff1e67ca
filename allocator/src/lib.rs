//! The `wasp` binary's allocator, declared by the binary and by every benchmark whose figures stand for it (the
//! host's, and the simulator's, which `wasp sim serve` runs): jemalloc, which returns what bursts freed (a 50k-pod
//! list, compiling a policy, a rescheduler fork) where glibc's per-thread arenas kept it. Freed pages go back after
//! a second, by a background thread, rather than jemalloc's default ten seconds at the next allocation: at 5000
//! nodes and 50k pods that is 530 -> 480 MiB resident.
//!
//! Its own crate so that the host and the simulator share one declaration; the tests leave it out (building
//! jemalloc from source is minutes of a cold CI run, and no test measures the allocator).

pub use tikv_jemallocator;

/// Declares the global allocator and its settings in the binary that calls it.
#[macro_export]
macro_rules! binary_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::tikv_jemallocator::Jemalloc = $crate::tikv_jemallocator::Jemalloc;

        /// jemalloc's `malloc_conf` (tikv-jemalloc-sys prefixes its symbols); `_RJEM_MALLOC_CONF` overrides it.
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
    };
}
