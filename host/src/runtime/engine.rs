//! The one wasmtime engine of the process, its epoch ticker and the linker that gives guests an empty WASI.

use super::cache::{ArtifactCache, CacheOutcome};
use super::compiler::Compiler;
use super::guest_memory::GuestMemory;
use super::instance::InstanceState;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{Component, Linker, Resource};
use wasmtime::{Config, Engine};
use wasmtime_wasi::p2::DynPollable;

/// Granularity of call deadlines. Epoch interruption costs ~10% of guest speed whatever the tick; the tick only
/// bounds how late a runaway call is stopped.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

pub struct Runtime {
    engine: Engine,
    /// The engine's configuration, for the throwaway engines that compile (see [`ArtifactCache`]).
    config: Config,
    linker: Linker<InstanceState>,
    cache: ArtifactCache,
    ticker_stop: Arc<AtomicBool>,
    /// What every instance of this engine may hold together.
    guest_memory: Arc<GuestMemory>,
}

impl Runtime {
    /// `cache_directory`: where compiled artifacts persist across restarts (None keeps them in memory only).
    pub fn new(cache_directory: Option<PathBuf>) -> anyhow::Result<Arc<Runtime>> {
        Runtime::with_compiler(cache_directory, Compiler::InProcess)
    }

    /// A runtime whose compiles run where `compiler` says (a serving host: in a child process, under limits).
    pub fn with_compiler(cache_directory: Option<PathBuf>, compiler: Compiler) -> anyhow::Result<Arc<Runtime>> {
        let config = engine_config();
        let engine = Engine::new(&config).map_err(|error| anyhow::anyhow!("creating the wasm engine: {error}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|error| anyhow::anyhow!("linking WASI: {error}"))?;
        refuse_waiting(&mut linker).map_err(|error| anyhow::anyhow!("linking WASI: {error}"))?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(engine.clone(), ticker_stop.clone())?;
        let cache = ArtifactCache::new(&engine, cache_directory, compiler);
        Ok(Arc::new(Runtime { engine, config, linker, cache, ticker_stop, guest_memory: Arc::default() }))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Where compiled artifacts persist, if anywhere (what else the host keeps across restarts goes beside them).
    pub fn cache_directory(&self) -> Option<&std::path::Path> {
        self.cache.directory()
    }

    /// The budget of every instance's memory together (unbounded until set).
    pub fn guest_memory(&self) -> &Arc<GuestMemory> {
        &self.guest_memory
    }

    pub(crate) fn linker(&self) -> &Linker<InstanceState> {
        &self.linker
    }

    /// Compiles a component, or takes it from the artifact cache. `digest` is the sha256 of `wasm`. The caller
    /// becomes a user of the cached component until it calls [`release`](Self::release).
    pub fn compile(&self, digest: &str, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        self.cache.get_or_compile(&self.engine, &self.config, digest, wasm)
    }

    /// One user of the component is done with it; the last one drops it from memory.
    pub fn release(&self, digest: &str) {
        self.cache.release(digest);
    }

    /// Epoch ticks that cover `deadline`, rounded up, at least one.
    pub fn deadline_ticks(deadline: Duration) -> u64 {
        (deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1)
    }
}

/// The configuration of the serving engine, and of every engine that compiles for it (here or in a child).
pub(super) fn engine_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true).cranelift_opt_level(wasmtime::OptLevel::Speed);
    // `WASP_PERFMAP=1 perf record ...` names the policies' compiled functions in profiles.
    if std::env::var_os("WASP_PERFMAP").is_some_and(|value| value == "1") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// The WASI version whose clock functions are replaced; wasmtime-wasi links every 0.2.x import to it.
const WASI_CLOCKS: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces the WASI calls that wait (a sleep is `subscribe-duration` then `poll`) with a refusal: the wait would
/// happen in the host, where the epoch deadline cannot interrupt it, and one sleeping filter would stall every
/// profile. The call fails at once as a trap naming the call; the instance is discarded like any trapped one.
fn refuse_waiting(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(WASI_CLOCKS)?;
    for function in ["subscribe-duration", "subscribe-instant"] {
        clock.func_wrap(function, move |_store, (_time,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(wasmtime::Error::msg(format!(
                "policies may not wait: {WASI_CLOCKS}.{function} (a sleep or timer) is refused; a call must compute its answer and return"
            )))
        })?;
    }
    linker.allow_shadowing(false);
    Ok(())
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
