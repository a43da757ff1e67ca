//! The one wasmtime engine of the process, its epoch ticker and the linker that gives guests an empty WASI.

use super::cache::{ArtifactCache, CacheOutcome};
use super::instance::InstanceState;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

/// Granularity of call deadlines. Epoch interruption costs ~10% of guest speed whatever the tick; the tick only
/// bounds how late a runaway call is stopped.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

pub struct Runtime {
    engine: Engine,
    linker: Linker<InstanceState>,
    cache: ArtifactCache,
    ticker_stop: Arc<AtomicBool>,
}

impl Runtime {
    /// `cache_directory`: where compiled artifacts persist across restarts (None keeps them in memory only).
    pub fn new(cache_directory: Option<PathBuf>) -> anyhow::Result<Arc<Runtime>> {
        let mut config = Config::new();
        config.wasm_component_model(true).epoch_interruption(true).cranelift_opt_level(wasmtime::OptLevel::Speed);
        // `WASP_PERFMAP=1 perf record ...` names the policies' compiled functions in profiles.
        if std::env::var_os("WASP_PERFMAP").is_some_and(|value| value == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|error| anyhow::anyhow!("creating the wasm engine: {error}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|error| anyhow::anyhow!("linking WASI: {error}"))?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(engine.clone(), ticker_stop.clone())?;
        let cache = ArtifactCache::new(&engine, cache_directory);
        Ok(Arc::new(Runtime { engine, linker, cache, ticker_stop }))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<InstanceState> {
        &self.linker
    }

    /// Compiles a component, or takes it from the artifact cache. `digest` is the sha256 of `wasm`.
    pub fn compile(&self, digest: &str, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        self.cache.get_or_compile(&self.engine, digest, wasm)
    }

    pub fn forget(&self, digest: &str) {
        self.cache.forget(digest);
    }

    /// Epoch ticks that cover `deadline`, rounded up, at least one.
    pub fn deadline_ticks(deadline: Duration) -> u64 {
        (deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn spawn_epoch_ticker(engine: Engine, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    std::thread::Builder::new().name("wasp-epoch".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(EPOCH_TICK);
            engine.increment_epoch();
        }
    })?;
    Ok(())
}
