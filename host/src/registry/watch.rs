//! Following the files: a `notify` watcher on the policy directory and the configuration file's directory
//! triggers [`PolicyRegistry::reload`] after a quiet period (so a burst of writes is one reload), and a periodic
//! rescan catches whatever the watcher missed. Reloads run one at a time on their own low-priority threads.

use super::bundle::{BUNDLE_SUFFIX, COMPRESSED_SUFFIX};
use super::{PolicyRegistry, ReloadReport};
use anyhow::Context;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Quiet time after the last change before reloading.
    pub debounce: Duration,
    /// A burst longer than this reloads anyway, so a file rewritten in a loop cannot starve reloads.
    pub max_delay: Duration,
    /// Rescan interval, the backstop for missed events.
    pub rescan: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions { debounce: Duration::from_millis(50), max_delay: Duration::from_secs(1), rescan: Duration::from_secs(30) }
    }
}

/// Watches while it lives.
pub struct PolicyWatcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which changed paths can change what loads: the kubelet's `..data` swap in either directory, a component or
/// bundle in the policy directory, the configuration file itself. Nothing else: a log file or an editor's backup
/// next to the configuration would otherwise reread and hash every component on each write. The atomic writer's
/// other entries (`..<timestamp>`, `..data_tmp`) precede the `..data` rename and are ignored.
struct Relevant {
    policy_dir: PathBuf,
    /// The configuration's directory (as watched) and file name.
    config: Option<(PathBuf, std::ffi::OsString)>,
}

impl Relevant {
    fn new(policy_dir: PathBuf, config_path: Option<&Path>) -> Relevant {
        let config = config_path.and_then(|path| Some((watched_parent(path), path.file_name()?.to_owned())));
        Relevant { policy_dir, config }
    }

    fn directories(&self) -> Vec<PathBuf> {
        let mut directories = vec![self.policy_dir.clone()];
        if let Some((directory, _)) = &self.config {
            if !directories.contains(directory) {
                directories.push(directory.clone());
            }
        }
        directories
    }

    fn matches(&self, path: &Path) -> bool {
        let (Some(name), Some(directory)) = (path.file_name(), path.parent()) else { return false };
        let text = name.to_string_lossy();
        if text == "..data" {
            return true;
        }
        let component =
            directory == self.policy_dir && !text.starts_with("..") && [".wasm", COMPRESSED_SUFFIX, BUNDLE_SUFFIX].iter().any(|suffix| text.ends_with(suffix));
        component || self.config.as_ref().is_some_and(|(config_dir, file)| directory == config_dir && name == file)
    }
}

/// Whether an event can mean new content: not a mere open or read. A reload reads every component, and inotify
/// reports those reads; taking them for changes made each reload start the next one, forever.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(access) => matches!(access, AccessKind::Close(AccessMode::Write)),
        _ => true,
    }
}

/// The directory a path is in, as the watcher reports it (`.` for a bare file name).
fn watched_parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl PolicyWatcher {
    /// Starts watching; `on_reload` hears of every reload that found a change. Needs a tokio runtime.
    pub fn spawn(
        registry: Arc<PolicyRegistry>,
        options: WatchOptions,
        on_reload: impl Fn(&ReloadReport) + Send + Sync + 'static,
    ) -> anyhow::Result<PolicyWatcher> {
        let (changes, received) = mpsc::unbounded_channel();
        let relevant = Relevant::new(registry.policy_dir(), registry.config_path());
        let directories = relevant.directories();
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| match result {
            Ok(event) if changes_content(&event.kind) && event.paths.iter().any(|path| relevant.matches(path)) => {
                let _ = changes.send(());
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "policy watcher error; the periodic rescan covers missed changes"),
        })
        .context("starting the policy file watcher")?;
        for directory in &directories {
            watcher.watch(directory, RecursiveMode::NonRecursive).with_context(|| format!("watching {}", directory.display()))?;
        }
        tracing::info!(?directories, debounce_ms = options.debounce.as_millis() as u64, rescan_s = options.rescan.as_secs(), "watching policies");
        let task = tokio::spawn(follow(registry, received, options, on_reload));
        Ok(PolicyWatcher { _watcher: watcher, task })
    }
}

async fn follow(
    registry: Arc<PolicyRegistry>,
    mut changes: mpsc::UnboundedReceiver<()>,
    options: WatchOptions,
    on_reload: impl Fn(&ReloadReport) + Send + Sync + 'static,
) {
    let threads = match low_priority_pool() {
        Ok(pool) => Arc::new(pool),
        Err(error) => {
            tracing::error!(%error, "cannot start the reload threads; policies will not reload");
            return;
        }
    };
    let mut rescan = tokio::time::interval(options.rescan);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The first tick fires at once: it picks up anything changed between loading and watching.
        tokio::select! {
            change = changes.recv() => {
                if change.is_none() {
                    return;
                }
                let burst_end = tokio::time::Instant::now() + options.max_delay;
                loop {
                    let quiet_until = (tokio::time::Instant::now() + options.debounce).min(burst_end);
                    match tokio::time::timeout_at(quiet_until, changes.recv()).await {
                        Ok(Some(())) if tokio::time::Instant::now() < burst_end => continue,
                        Ok(None) => return,
                        _ => break,
                    }
                }
            }
            _ = rescan.tick() => {}
        }
        let (reloading, pool) = (registry.clone(), threads.clone());
        match tokio::task::spawn_blocking(move || pool.install(|| reloading.reload())).await {
            Ok(report) if !report.unchanged => on_reload(&report),
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "policy reload panicked; the last good generation keeps serving"),
        }
    }
}

/// Threads for compiling and canarying new versions (wasmtime compiles in parallel on the current rayon pool),
/// at nice 19, the lowest priority: a rollout on a busy host takes the CPU that scheduling leaves.
fn low_priority_pool() -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(std::thread::available_parallelism().map_or(1, usize::from))
        .thread_name(|index| format!("wasp-reload-{index}"))
        .start_handler(|_| {
            // SAFETY: setpriority has no memory effects; on Linux, `who = 0` with PRIO_PROCESS is the calling thread.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } != 0 {
                tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower the reload thread's priority");
            }
        })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_data_swap_components_and_the_configuration_trigger_reloads() {
        let relevant = Relevant::new(PathBuf::from("/etc/wasp/policies"), Some(Path::new("/etc/wasp/config/config.yaml")));
        assert_eq!(relevant.directories(), [PathBuf::from("/etc/wasp/policies"), PathBuf::from("/etc/wasp/config")]);
        for path in [
            "/etc/wasp/policies/..data",
            "/etc/wasp/policies/resources-fit.wasm",
            "/etc/wasp/policies/mine.wasm.zst",
            "/etc/wasp/policies/default.tar.zst",
            "/etc/wasp/config/config.yaml",
            "/etc/wasp/config/..data",
        ] {
            assert!(relevant.matches(Path::new(path)), "{path}");
        }
        for path in [
            "/etc/wasp/policies/..data_tmp",
            "/etc/wasp/policies/..2026_11_29_10_00_00.123456789",
            "/etc/wasp/policies/notes.txt",
            "/etc/wasp/policies/mine.wasm.gz",
            "/etc/wasp/config/wasp.log",
            "/etc/wasp/config/other.wasm",
            "/etc/wasp/config/config.yaml.swp",
        ] {
            assert!(!relevant.matches(Path::new(path)), "{path}");
        }
        assert!(!changes_content(&EventKind::Access(AccessKind::Open(AccessMode::Read))), "a reload's own reads");
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(changes_content(&EventKind::Access(AccessKind::Close(AccessMode::Write))), "a writer done");
        assert!(changes_content(&EventKind::Modify(notify::event::ModifyKind::Any)));
        let here = Relevant::new(PathBuf::from("policies"), Some(Path::new("config.yaml")));
        assert_eq!(here.directories(), [PathBuf::from("policies"), PathBuf::from(".")]);
        assert!(here.matches(Path::new("./config.yaml")) && !here.matches(Path::new("./wasp.log")));
    }
}
