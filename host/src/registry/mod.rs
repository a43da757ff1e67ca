//! The policy registry: which policies and scheduler profiles serve now, and how that changes without a restart.
//!
//! A [`Generation`] is one consistent set: the configuration, every policy it names (loaded, configured and
//! canary-tested) and the profiles resolved against them. Decisions read the current generation once and keep
//! it to the end, so calls in flight finish on the versions they started with and an old version is dropped
//! when its last call ends. [`PolicyRegistry::reload`] builds the next generation off the hot path and swaps it
//! in atomically; [`watch`] calls it when the files change.
//!
//! What a bad update does: a policy that does not load or fails its canary keeps its last good version
//! serving; a configuration is taken or refused as a whole; a policy file removed while a profile uses it is
//! refused. Every refusal names the file and the reason, in the log, the metrics and [`PolicyRegistry::status`].

mod canary;
pub mod metrics;
pub mod source;
pub mod watch;

use crate::policy::metrics::PolicyMetrics;
use crate::policy::{LoadedPolicy, PolicyOptions};
use crate::runtime::bindings::types::PolicyKind;
use crate::runtime::Runtime;
use crate::scheduler::config::SchedulerConfig;
use crate::scheduler::cycle::{ProfilePolicies, SchedulingPolicy};
use anyhow::{bail, Context};
use arc_swap::ArcSwap;
use metrics::{PolicyInfoLabels, ReloadMetrics};
use serde::Serialize;
use source::{Fingerprint, SourceSnapshot};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// One consistent set of configuration, policies and profiles.
pub struct Generation {
    /// Starts at 1 and grows by one per swap.
    pub number: u64,
    pub config: SchedulerConfig,
    pub policies: BTreeMap<String, Arc<LoadedPolicy>>,
    pub profiles: HashMap<String, Arc<ProfilePolicies>>,
}

/// What one reload did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReloadReport {
    /// The generation serving after the reload.
    pub generation: u64,
    /// Nothing on disk changed since the last reload: nothing was done.
    pub unchanged: bool,
    /// Policies whose new version (or new settings) now serve.
    pub swapped: Vec<String>,
    /// Whether a new configuration now serves.
    pub config_swapped: bool,
    /// Every refusal, naming the file or policy and the reason; what it concerned keeps its last good version.
    pub errors: Vec<String>,
}

impl ReloadReport {
    fn result(&self) -> &'static str {
        match (self.unchanged, self.errors.is_empty()) {
            (true, _) => "unchanged",
            (false, true) => "success",
            (false, false) => "failure",
        }
    }
}

/// The state `/policies` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryStatus {
    pub generation: u64,
    pub policy_dir: String,
    pub config_file: Option<String>,
    pub config_error: Option<String>,
    pub last_reload: Option<String>,
    pub policies: Vec<PolicyStatus>,
    pub profiles: Vec<ProfileStatus>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub size: usize,
    pub source: String,
    pub kinds: Vec<&'static str>,
    pub loaded_at: String,
    /// Why the last update of this policy was refused (its last good version serves).
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    pub scheduler_name: String,
    pub filters: Vec<String>,
    pub scores: Vec<(String, u32)>,
}

#[derive(Default)]
struct ReloadState {
    fingerprint: Fingerprint,
    /// Last refusal per policy name, and for the configuration under [`CONFIG_KEY`].
    errors: BTreeMap<String, String>,
    last_reload: Option<SystemTime>,
}

const CONFIG_KEY: &str = "";

pub struct PolicyRegistry {
    runtime: Arc<Runtime>,
    config_path: Option<PathBuf>,
    current: ArcSwap<Generation>,
    /// Held for a whole reload, so reloads never interleave.
    state: Mutex<ReloadState>,
    reload_metrics: ReloadMetrics,
    call_metrics: Arc<PolicyMetrics>,
}

/// Runs `work`, which calls into guests, where a guest's WASI calls (its stdout, say) can block: wasmtime-wasi
/// blocks on the ambient tokio runtime, which panics on an async worker thread.
fn off_async_worker<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => std::thread::scope(|scope| scope.spawn(work).join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
        Err(_) => work(),
    }
}

/// How the configuration runs the policy called `name`.
fn options_for(config: &SchedulerConfig, name: &str) -> PolicyOptions {
    let policy_config = config.policies.get(name).cloned().unwrap_or_default();
    PolicyOptions { settings: policy_config.settings_json(), limits: policy_config.limits(), failure_mode: policy_config.failure_mode }
}

/// The scheduler names of the profiles that use `policy`, for messages.
fn users_of(config: &SchedulerConfig, policy: &str) -> Vec<String> {
    config
        .profiles
        .iter()
        .filter(|profile| profile.filters.iter().chain(profile.scores.iter().map(|score| &score.policy)).any(|name| name == policy))
        .map(|profile| profile.scheduler_name.clone())
        .collect()
}

/// Resolves the profiles against loaded policies, checking each is used as a kind it implements.
pub fn resolve_profiles(
    config: &SchedulerConfig,
    policies: &BTreeMap<String, Arc<LoadedPolicy>>,
) -> anyhow::Result<HashMap<String, Arc<ProfilePolicies>>> {
    let mut profiles = HashMap::new();
    for (index, profile) in config.profiles.iter().enumerate() {
        let lookup = |name: &str, kind: PolicyKind, field: &str| -> anyhow::Result<Arc<dyn SchedulingPolicy>> {
            let policy = policies.get(name).with_context(|| format!("profiles[{index}].{field}: policy {name} is not loaded"))?;
            if !policy.implements(kind) {
                bail!("profiles[{index}].{field}: policy {name} does not implement {}", crate::cli::kind_name(kind));
            }
            Ok(policy.clone())
        };
        let filters = profile.filters.iter().map(|name| lookup(name, PolicyKind::Filter, "filters")).collect::<anyhow::Result<_>>()?;
        let scores = profile
            .scores
            .iter()
            .map(|score| Ok((lookup(&score.policy, PolicyKind::Score, "scores")?, score.weight)))
            .collect::<anyhow::Result<_>>()?;
        let resolved = ProfilePolicies { scheduler_name: profile.scheduler_name.clone(), filters, scores };
        profiles.insert(profile.scheduler_name.clone(), Arc::new(resolved));
    }
    Ok(profiles)
}

impl PolicyRegistry {
    /// Loads every policy `config` names from its policy directory. Any failure is an error: at start there is
    /// no last good version to keep. With `config_path`, reloads follow that file too.
    pub fn new(runtime: &Arc<Runtime>, config: SchedulerConfig, config_path: Option<PathBuf>) -> anyhow::Result<PolicyRegistry> {
        off_async_worker(|| Self::load_first(runtime, config, config_path))
    }

    fn load_first(runtime: &Arc<Runtime>, config: SchedulerConfig, config_path: Option<PathBuf>) -> anyhow::Result<PolicyRegistry> {
        let snapshot = SourceSnapshot::read(&config.policy_dir, config_path.as_deref());
        let registry = Self::serving(runtime, &config, config_path, HashMap::new());
        registry.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).fingerprint = snapshot.fingerprint();
        let (policies, _, errors) = registry.build_policies(&config, &snapshot, &registry.current.load());
        if let Some((_, error)) = errors.into_iter().next() {
            bail!(error);
        }
        let profiles = resolve_profiles(&config, &policies)?;
        registry.publish(Generation { number: 1, config, policies, profiles });
        Ok(registry)
    }

    /// A registry serving `profiles` as they are (policies compiled into the host, for the benchmark that runs
    /// them side by side with their components), under `config`. A reload replaces them with components.
    pub fn with_profiles(runtime: &Arc<Runtime>, config: SchedulerConfig, profiles: HashMap<String, Arc<ProfilePolicies>>) -> PolicyRegistry {
        Self::serving(runtime, &config, None, profiles)
    }

    fn serving(
        runtime: &Arc<Runtime>,
        config: &SchedulerConfig,
        config_path: Option<PathBuf>,
        profiles: HashMap<String, Arc<ProfilePolicies>>,
    ) -> PolicyRegistry {
        let number = u64::from(!profiles.is_empty());
        let generation = Generation { number, config: config.clone(), policies: BTreeMap::new(), profiles };
        PolicyRegistry {
            runtime: runtime.clone(),
            config_path,
            current: ArcSwap::from_pointee(generation),
            state: Mutex::new(ReloadState::default()),
            reload_metrics: ReloadMetrics::default(),
            call_metrics: Arc::new(PolicyMetrics::default()),
        }
    }

    /// The generation serving now. Hold it for a whole decision.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Registers reload and policy call metrics.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.reload_metrics.register(registry);
        self.call_metrics.register(registry);
    }

    pub fn policy_dir(&self) -> PathBuf {
        self.current().config.policy_dir.clone()
    }

    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config_path.as_deref()
    }

    /// Reads the policy directory and configuration file; if anything changed, builds, canaries and swaps in
    /// the next generation. Never fails: refusals are in the report, and what they concern keeps serving.
    pub fn reload(&self) -> ReloadReport {
        off_async_worker(|| self.reload_now())
    }

    fn reload_now(&self) -> ReloadReport {
        let started = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = self.current();
        let snapshot = SourceSnapshot::read(&old.config.policy_dir, self.config_path.as_deref());
        let fingerprint = snapshot.fingerprint();
        if fingerprint == state.fingerprint {
            return ReloadReport { generation: old.number, unchanged: true, ..Default::default() };
        }
        state.fingerprint = fingerprint;
        let mut report = ReloadReport { generation: old.number, errors: snapshot.unreadable.clone(), ..Default::default() };

        let mut next = None;
        match self.changed_config(&snapshot, &old) {
            Ok(None) => {
                state.errors.remove(CONFIG_KEY);
            }
            Ok(Some(config)) => match self.build_generation(&config, &snapshot, &old) {
                Ok((generation, swapped)) => {
                    // Every policy of the new configuration loaded: no refusal stands.
                    state.errors.clear();
                    report.config_swapped = true;
                    report.swapped = swapped;
                    next = Some(generation);
                }
                Err(error) => {
                    let message = self.config_refused(error);
                    state.errors.insert(CONFIG_KEY.into(), message.clone());
                    report.errors.push(message);
                }
            },
            Err(message) => {
                state.errors.insert(CONFIG_KEY.into(), message.clone());
                report.errors.push(message);
            }
        }
        let next = next.or_else(|| {
            // The configuration stays; each policy whose file changed swaps alone or keeps its last good version.
            let (policies, swapped, errors) = self.build_policies(&old.config, &snapshot, &old);
            for name in old.config.policy_names() {
                match errors.iter().find(|(refused, _)| *refused == name) {
                    Some((_, error)) => state.errors.insert(name, error.clone()),
                    None => state.errors.remove(&name),
                };
            }
            report.errors.extend(errors.into_iter().map(|(_, error)| error));
            if swapped.is_empty() {
                return None;
            }
            let profiles = resolve_profiles(&old.config, &policies).expect("same configuration, policies of the same kinds");
            report.swapped = swapped;
            Some(Generation { number: old.number + 1, config: old.config.clone(), policies, profiles })
        });
        if let Some(generation) = next {
            report.generation = generation.number;
            self.publish(generation);
        }
        state.last_reload = Some(SystemTime::now());
        let took = started.elapsed();
        self.reload_metrics.reloaded(report.result(), took);
        if report.errors.is_empty() {
            tracing::info!(generation = report.generation, swapped = ?report.swapped, config_swapped = report.config_swapped, took_ms = took.as_secs_f64() * 1e3, "policies reloaded");
        } else {
            for error in &report.errors {
                tracing::warn!(generation = report.generation, %error, "reload refused; the last good version keeps serving");
            }
        }
        report
    }

    fn config_refused(&self, reason: impl std::fmt::Display) -> String {
        let file = self.config_path.as_ref().map_or_else(|| "(built in)".into(), |path| path.display().to_string());
        format!("configuration {file} refused, the previous one keeps serving: {reason}")
    }

    /// The configuration file's new contents, if they parse and differ from what serves.
    fn changed_config(&self, snapshot: &SourceSnapshot, old: &Generation) -> Result<Option<SchedulerConfig>, String> {
        let Some(text) = &snapshot.config else { return Ok(None) };
        let refused = |reason: String| self.config_refused(reason);
        let text = text.clone().map_err(refused)?;
        let config = SchedulerConfig::parse(&text).map_err(|error| refused(format!("{error:#}")))?;
        if config == old.config {
            return Ok(None);
        }
        if config.policy_dir != old.config.policy_dir {
            return Err(refused(format!(
                "policyDir changed from {} to {}: the policy directory is fixed at start; restart to change it",
                old.config.policy_dir.display(),
                config.policy_dir.display()
            )));
        }
        if config.leader_election != old.config.leader_election {
            tracing::warn!("leaderElection changed: it takes effect at the next restart");
        }
        Ok(Some(config))
    }

    /// A generation for a new configuration, or the first refusal (then none of it serves).
    fn build_generation(&self, config: &SchedulerConfig, snapshot: &SourceSnapshot, old: &Generation) -> anyhow::Result<(Generation, Vec<String>)> {
        let (policies, swapped, errors) = self.build_policies(config, snapshot, old);
        if !errors.is_empty() {
            let messages: Vec<String> = errors.into_iter().map(|(_, error)| error).collect();
            bail!(messages.join("; "));
        }
        let profiles = resolve_profiles(config, &policies)?;
        Ok((Generation { number: old.number + 1, config: config.clone(), policies, profiles }, swapped))
    }

    /// Every policy `config` names: the serving version when neither its file nor its options changed, else a
    /// new load that passed the canary, else (with the refusal in the errors) the serving version if any.
    /// Returns the policies, the names that got a new version, and the refusals by policy name.
    fn build_policies(
        &self,
        config: &SchedulerConfig,
        snapshot: &SourceSnapshot,
        old: &Generation,
    ) -> (BTreeMap<String, Arc<LoadedPolicy>>, Vec<String>, Vec<(String, String)>) {
        let (mut policies, mut swapped, mut errors) = (BTreeMap::new(), Vec::new(), Vec::new());
        for name in config.policy_names() {
            let options = options_for(config, &name);
            let serving = old.policies.get(&name);
            let Some(file) = snapshot.policies.get(&name) else {
                let path = config.policy_dir.join(format!("{name}.wasm"));
                let used_by = users_of(config, &name).join(", ");
                match serving {
                    Some(serving) => {
                        let error = format!("policy {name}: {} was removed, but profile {used_by} uses it; the loaded version keeps serving", path.display());
                        errors.push((name.clone(), error));
                        policies.insert(name, serving.clone());
                    }
                    None => errors.push((name.clone(), format!("policy {name}: {} does not exist (used by profile {used_by})", path.display()))),
                }
                continue;
            };
            if let Some(serving) = serving.filter(|serving| serving.digest == file.digest && serving.options == options) {
                policies.insert(name, serving.clone());
                continue;
            }
            match self.load_and_canary(&name, file, options) {
                Ok(policy) => {
                    swapped.push(name.clone());
                    policies.insert(name, Arc::new(policy));
                }
                Err(error) => {
                    let error = match serving {
                        Some(serving) => format!("{error}; version {} ({}) keeps serving", serving.descriptor.version, &serving.digest[..12]),
                        None => error,
                    };
                    errors.push((name.clone(), error));
                    if let Some(serving) = serving {
                        policies.insert(name, serving.clone());
                    }
                }
            }
        }
        (policies, swapped, errors)
    }

    fn load_and_canary(&self, name: &str, file: &source::PolicyFile, options: PolicyOptions) -> Result<LoadedPolicy, String> {
        let source = file.path.display().to_string();
        let policy = LoadedPolicy::load(&self.runtime, &source, &file.bytes, options).map_err(|error| error.to_string())?;
        if policy.name() != name {
            return Err(format!("policy {source}: the component calls itself {:?}, but the file name loads it as {name:?}", policy.name()));
        }
        canary::smoke_test(&policy).map_err(|error| format!("policy {source}: {error}"))?;
        policy.report_to(self.call_metrics.clone());
        Ok(policy)
    }

    fn publish(&self, generation: Generation) {
        let versions = generation.policies.values().map(|policy| PolicyInfoLabels {
            policy: policy.name().to_string(),
            version: policy.descriptor.version.clone(),
            sha256: policy.digest.clone(),
        });
        self.reload_metrics.serving(generation.number, versions);
        self.current.store(Arc::new(generation));
    }

    /// What serves, with the last refusal of each policy and of the configuration.
    pub fn status(&self) -> RegistryStatus {
        let generation = self.current();
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let timestamp = |time: SystemTime| jiff::Timestamp::try_from(time).map(|t| t.to_string()).unwrap_or_default();
        RegistryStatus {
            generation: generation.number,
            policy_dir: generation.config.policy_dir.display().to_string(),
            config_file: self.config_path.as_ref().map(|path| path.display().to_string()),
            config_error: state.errors.get(CONFIG_KEY).cloned(),
            last_reload: state.last_reload.map(timestamp),
            policies: generation
                .policies
                .values()
                .map(|policy| PolicyStatus {
                    name: policy.name().to_string(),
                    version: policy.descriptor.version.clone(),
                    sha256: policy.digest.clone(),
                    size: policy.size,
                    source: policy.source.clone(),
                    kinds: policy.descriptor.kinds.iter().map(|kind| crate::cli::kind_name(*kind)).collect(),
                    loaded_at: timestamp(policy.loaded_at),
                    last_error: state.errors.get(policy.name()).cloned(),
                })
                .collect(),
            profiles: generation
                .config
                .profiles
                .iter()
                .map(|profile| ProfileStatus {
                    scheduler_name: profile.scheduler_name.clone(),
                    filters: profile.filters.clone(),
                    scores: profile.scores.iter().map(|score| (score.policy.clone(), score.weight)).collect(),
                })
                .collect(),
        }
    }
}
