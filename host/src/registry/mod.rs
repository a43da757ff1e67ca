//! The policy registry: which policies serve every loop now, and how that changes without a restart.
//!
//! A [`Generation`] is one consistent set: the configuration, every policy it names (loaded, configured and
//! canary-tested) and each loop's [`Plans`] resolved against them. Decisions read the current generation once
//! and keep it to the end, so calls in flight finish on the versions they started with and an old version is
//! dropped when its last call ends. [`PolicyRegistry::reload`] builds the next generation off the hot path and
//! swaps it in atomically; [`watch`] calls it when the files change.
//!
//! What a bad update does: a policy that does not load, fails its canary or no longer implements what its users
//! need keeps its last good version serving; a configuration is taken or refused as a whole; a policy file
//! removed while something uses it is refused. Every refusal names the file, who uses it and the reason, in the
//! log, the metrics (by [`RefusalReason`]) and [`PolicyRegistry::status`], which never waits for a reload.

pub mod bundle;
mod canary;
pub mod metrics;
mod plans;
pub mod remote;
pub mod signature;
pub mod source;
pub mod watch;

pub use plans::{resolve, Plans, ProfilePolicies};

use crate::config::{describe_users, HostConfig, Verification};
use crate::policy::metrics::PolicyMetrics;
use crate::policy::{LoadedPolicy, PolicyOptions};
use crate::runtime::{off_async_worker, Runtime};
use arc_swap::ArcSwap;
use metrics::{PolicyInfoLabels, ReloadMetrics};
use serde::Serialize;
use signature::PublicKey;
use source::{Fingerprint, PolicyFile, SourceSnapshot};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// One consistent set of configuration, policies and plans.
pub struct Generation {
    /// Starts at 1 and grows by one per swap.
    pub number: u64,
    pub config: HostConfig,
    pub policies: BTreeMap<String, Arc<LoadedPolicy>>,
    pub plans: Plans,
}

/// Why an update was refused: the `reason` label of `wasp_policy_reloads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// The file or directory could not be read.
    Unreadable,
    /// Not a valid component, wrong contract, bad descriptor, or rejected settings.
    InvalidPolicy,
    /// The component calls itself by another name than its file.
    NameMismatch,
    /// It trapped, timed out, ran out of memory or answered malformed results on the sample cluster.
    Canary,
    /// It no longer implements a kind its users need.
    Kinds,
    /// A policy something uses has no file.
    Missing,
    /// Its signature is missing where one is required, does not check, or a key cannot be read.
    Signature,
    /// Its OCI source could not be pulled (the registry is down, refuses the credentials, or answers a bad
    /// artifact) and the store does not hold it.
    Registry,
    /// The configuration does not parse, is invalid, or names what cannot serve.
    Config,
}

impl RefusalReason {
    /// Whether the refusal is about what a file holds (which a stand-in can answer for at start), not about a
    /// file that is missing or unreadable, or a configuration that cannot run.
    pub fn concerns_content(self) -> bool {
        matches!(self, RefusalReason::InvalidPolicy | RefusalReason::NameMismatch | RefusalReason::Canary | RefusalReason::Signature)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Unreadable => "unreadable",
            RefusalReason::InvalidPolicy => "invalid-policy",
            RefusalReason::NameMismatch => "name-mismatch",
            RefusalReason::Canary => "canary",
            RefusalReason::Kinds => "kinds",
            RefusalReason::Missing => "missing",
            RefusalReason::Signature => "signature",
            RefusalReason::Registry => "registry",
            RefusalReason::Config => "config",
        }
    }
}

/// One refused update, with a message naming the file or policy, who uses it, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
}

impl Refusal {
    fn new(reason: RefusalReason, message: impl Into<String>) -> Refusal {
        Refusal { reason, message: message.into() }
    }
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
    /// Every refusal; what it concerned keeps its last good version.
    pub errors: Vec<Refusal>,
}

impl ReloadReport {
    fn result(&self) -> &'static str {
        match (self.unchanged, self.errors.is_empty()) {
            (true, _) => "unchanged",
            (false, true) => "success",
            (false, false) => "failure",
        }
    }

    /// Every refusal's message, joined.
    pub fn error_messages(&self) -> String {
        self.errors.iter().map(|refusal| refusal.message.as_str()).collect::<Vec<_>>().join("; ")
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
    pub rescheduler_strategies: Vec<String>,
    /// The evict policy the scheduler's preemption runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    pub autoscaler_policies: Vec<String>,
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
    pub used_by: Vec<String>,
    pub loaded_at: String,
    /// False for a stand-in: the file was refused at start and no version of it has loaded since (its failure
    /// mode answers; `lastError` says why).
    pub loaded: bool,
    /// Guest memory of its live instances now.
    pub memory_bytes: u64,
    /// Why the last update of this policy was refused (its last good version serves).
    pub last_error: Option<String>,
    /// The key whose signature was checked before the serving version was compiled; none when not checked or
    /// unsigned (`verification.require` false).
    pub signed_by: Option<String>,
    /// Its circuit breaker: open while its failure mode answers for it after failures in a row.
    pub breaker: crate::policy::breaker::BreakerStatus,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    pub scheduler_name: String,
    pub filters: Vec<String>,
    pub scores: Vec<(String, u32)>,
}

/// What a refusal concerns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Subject {
    Config,
    Policy(String),
}

/// Standing refusals and when the last reload ran: published at the end of each reload, so `/policies` reads
/// them without waiting for one in progress.
#[derive(Default, Clone)]
struct Outcome {
    errors: BTreeMap<Subject, String>,
    last_reload: Option<SystemTime>,
}

pub struct PolicyRegistry {
    runtime: Arc<Runtime>,
    config_path: Option<PathBuf>,
    current: ArcSwap<Generation>,
    outcome: ArcSwap<Outcome>,
    /// What the files looked like at the last reload; held for a whole reload, so reloads never interleave.
    fingerprint: Mutex<Fingerprint>,
    reload_metrics: ReloadMetrics,
    call_metrics: Arc<PolicyMetrics>,
    /// The cluster canaries sample, once the host has one.
    live: std::sync::OnceLock<Arc<crate::cluster::SharedCluster>>,
    /// Policies pulled from OCI registries, kept by digest.
    remote: remote::RemoteSources,
}

/// How the configuration runs the policy called `name`.
fn options_for(config: &HostConfig, name: &str) -> PolicyOptions {
    let policy_config = config.policies.get(name).cloned().unwrap_or_default();
    PolicyOptions { settings: policy_config.settings_json(), limits: policy_config.limits(), failure_mode: policy_config.failure_mode }
}

/// What answers while a refused update does not: the serving version, or a stand-in's failure mode.
fn still_serving(serving: &LoadedPolicy) -> String {
    match serving.refusal() {
        None => format!("version {} ({}) keeps serving", serving.descriptor.version, &serving.digest[..serving.digest.len().min(12)]),
        Some(_) => format!("no version of it has loaded since the host started: its failure mode ({:?}) answers for it", serving.options.failure_mode),
    }
}

/// The verification keys a configuration names, read (or why not) once per reload.
type KeyRing = BTreeMap<PathBuf, Result<PublicKey, String>>;

/// Which key signed `file`, checked as `verification` asks before anything of it is compiled: none when signatures
/// are not checked, or when one is missing and not required; a refusal when one is missing and required, when it
/// does not check with any of the keys, or when a key cannot be read.
fn signer_of(file: &PolicyFile, verification: &Verification, keys: &KeyRing) -> Result<Option<String>, Refusal> {
    if !verification.checks() {
        return Ok(None);
    }
    let refuse = |why: &str| Refusal::new(RefusalReason::Signature, format!("policy {}: refused before it was compiled: {why}", file.path.display()));
    let usable = verification.keys.iter().map(|path| match keys.get(path) {
        Some(Ok(key)) => Ok(key),
        Some(Err(error)) => Err(refuse(error)),
        None => Err(refuse(&format!("verification key {} was not read", path.display()))),
    });
    let usable = usable.collect::<Result<Vec<_>, _>>()?;
    if let Some(artifact) = &file.artifact {
        if artifact.signatures.is_empty() && !verification.require {
            return Ok(None);
        }
        return artifact.signer(&usable).map(|key| Some(key.name.clone())).map_err(|why| refuse(&why));
    }
    let signature = match &file.signature {
        None if !verification.require => return Ok(None),
        None => None,
        Some(Err(error)) => return Err(refuse(&format!("its signature cannot be read: {error}"))),
        Some(Ok(bytes)) => Some(bytes.as_slice()),
    };
    signature::verify(&usable, &file.bytes, signature).map(|key| Some(key.name.clone())).map_err(|why| refuse(&why))
}

/// Policies, the names that got a new version, and the refusals by policy name.
type BuiltPolicies = (BTreeMap<String, Arc<LoadedPolicy>>, Vec<String>, Vec<(String, Refusal)>);

impl PolicyRegistry {
    /// Loads every policy `config` names from its policy directory. Any failure is an error (for commands that
    /// run once: `wasp simulate`, `wasp reschedule`). With `config_path`, reloads follow that file too.
    pub fn new(runtime: &Arc<Runtime>, config: HostConfig, config_path: Option<PathBuf>) -> anyhow::Result<PolicyRegistry> {
        off_async_worker(|| Self::load_first(runtime, config, config_path, false)).map(|(registry, _)| registry)
    }

    /// [`new`](Self::new) for a host that serves: a policy whose file is there but refused (it does not compile,
    /// its settings or its signature are refused, its canary fails) gets a [stand-in](LoadedPolicy::stand_in)
    /// whose failure mode answers for it, so one bad file cannot stop a restarted host from serving the rest.
    /// Still an error: a configuration that cannot be read or run, and a policy file that is not there yet (the
    /// host waits for the kubelet to project it). Returns the refusals the stand-ins answer for.
    pub fn start(runtime: &Arc<Runtime>, config: HostConfig, config_path: Option<PathBuf>) -> anyhow::Result<(PolicyRegistry, Vec<Refusal>)> {
        off_async_worker(|| Self::load_first(runtime, config, config_path, true))
    }

    fn load_first(runtime: &Arc<Runtime>, config: HostConfig, config_path: Option<PathBuf>, stand_ins: bool) -> anyhow::Result<(PolicyRegistry, Vec<Refusal>)> {
        let started = Instant::now();
        let snapshot = SourceSnapshot::read(&config.policy_dir, config_path.as_deref());
        // Said now: a reload reports them only when the directory changes again.
        for message in &snapshot.unreadable {
            tracing::warn!(%message, "a file of the policy directory is not used");
        }
        let registry = Self::serving(runtime, &config, config_path, Plans::default());
        *registry.fingerprint.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = snapshot.fingerprint().with_files(&config.key_files());
        let (mut policies, _, errors) = registry.build_policies(&config, &snapshot, &registry.current.load());
        if let Some((_, refusal)) = errors.iter().find(|(_, refusal)| !(stand_ins && refusal.reason.concerns_content())) {
            anyhow::bail!(refusal.message.clone());
        }
        let users: BTreeMap<String, Vec<crate::config::PolicyUser>> = config.policy_users().into_iter().collect();
        let mut outcome = Outcome::default();
        for (name, refusal) in &errors {
            let file = snapshot.policies.get(name);
            let (digest, size) = file.map_or((String::new(), 0), |file| (file.digest.clone(), file.bytes.len()));
            let source = file.map_or_else(|| name.clone(), |file| file.path.display().to_string());
            let mut kinds = Vec::new();
            for kind in users.get(name).into_iter().flatten().map(|user| user.kind()) {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            let stand_in = LoadedPolicy::stand_in(runtime, name, &source, digest, size, kinds, options_for(&config, name), refusal.message.clone());
            stand_in.report_to(registry.call_metrics.clone());
            tracing::warn!(policy = %name, reason = refusal.reason.as_str(), error = %refusal.message, failure_mode = ?stand_in.options.failure_mode, "policy refused at start, with no earlier version to keep: its failure mode answers for it until a version of it loads");
            policies.insert(name.clone(), Arc::new(stand_in));
            outcome.errors.insert(Subject::Policy(name.clone()), refusal.message.clone());
        }
        let plans = resolve(&config, &policies)?;
        let refusals: Vec<Refusal> = errors.into_iter().map(|(_, refusal)| refusal).collect();
        if !refusals.is_empty() {
            let reasons: Vec<&str> = refusals.iter().map(|refusal| refusal.reason.as_str()).collect();
            registry.reload_metrics.reloaded("failure", &reasons, started.elapsed());
            outcome.last_reload = Some(SystemTime::now());
            registry.outcome.store(Arc::new(outcome));
        }
        registry.publish(Generation { number: 1, config, policies, plans });
        Ok((registry, refusals))
    }

    /// A registry serving `plans` as they are (policies compiled into the host, for the benchmark that runs
    /// them side by side with their components), under `config`. A reload replaces them with components.
    pub fn with_plans(runtime: &Arc<Runtime>, config: HostConfig, plans: Plans) -> PolicyRegistry {
        Self::serving(runtime, &config, None, plans)
    }

    fn serving(runtime: &Arc<Runtime>, config: &HostConfig, config_path: Option<PathBuf>, plans: Plans) -> PolicyRegistry {
        let number = u64::from(!plans.scheduling.is_empty());
        let generation = Generation { number, config: config.clone(), policies: BTreeMap::new(), plans };
        PolicyRegistry {
            runtime: runtime.clone(),
            config_path,
            current: ArcSwap::from_pointee(generation),
            outcome: ArcSwap::from_pointee(Outcome::default()),
            fingerprint: Mutex::new(Fingerprint::default()),
            reload_metrics: ReloadMetrics::default(),
            call_metrics: Arc::new(PolicyMetrics::default()),
            live: std::sync::OnceLock::new(),
            remote: remote::RemoteSources::new(runtime.cache_directory().map(std::path::Path::to_path_buf)),
        }
    }

    /// Canaries of later versions run on a fork of this cluster.
    pub fn canary_on(&self, cluster: Arc<crate::cluster::SharedCluster>) {
        let _ = self.live.set(cluster);
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

    /// Brings `wasp_policy_memory_bytes` and `wasp_policy_circuit_open` up to date (at scrape time).
    pub fn refresh_gauges(&self) {
        let current = self.current();
        self.call_metrics.memory_in_use(current.policies.iter().map(|(name, policy)| (name.clone(), policy.memory_in_use())));
        self.call_metrics.circuits_open(current.policies.iter().map(|(name, policy)| (name.clone(), policy.circuit_open())));
    }

    /// Circuit breaker trips of the serving policies from now on.
    pub fn breaker_trips(&self) -> tokio::sync::broadcast::Receiver<crate::policy::metrics::Trip> {
        self.call_metrics.subscribe_trips()
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
        let mut fingerprint = self.fingerprint.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = self.current();
        let mut snapshot = SourceSnapshot::read_packed(&old.config.policy_dir, self.config_path.as_deref());
        self.reload_metrics.directory_read();
        let new_fingerprint = snapshot.fingerprint().with_files(&old.config.key_files());
        // A source that could not be pulled is tried again at every rescan, though no file changed.
        if new_fingerprint == *fingerprint && !self.remote.failing() {
            return ReloadReport { generation: old.number, unchanged: true, ..Default::default() };
        }
        self.remote.failed(false);
        *fingerprint = new_fingerprint;
        snapshot.unpack_bundles();
        let mut outcome = Outcome::clone(&self.outcome.load());
        let mut report = ReloadReport { generation: old.number, ..Default::default() };
        report.errors.extend(snapshot.unreadable.iter().map(|message| Refusal::new(RefusalReason::Unreadable, message.clone())));

        let next = match self.changed_config(&snapshot, &old) {
            Ok(None) => {
                outcome.errors.remove(&Subject::Config);
                None
            }
            Ok(Some(config)) => match self.build_generation(&config, &snapshot, &old) {
                Ok((generation, swapped)) => {
                    // Every policy of the new configuration loaded: no refusal stands.
                    outcome.errors.clear();
                    report.config_swapped = true;
                    report.swapped = swapped;
                    Some(generation)
                }
                Err(refusal) => {
                    let refusal = Refusal::new(refusal.reason, self.config_refused(refusal.message));
                    outcome.errors.insert(Subject::Config, refusal.message.clone());
                    report.errors.push(refusal);
                    None
                }
            },
            Err(refusal) => {
                outcome.errors.insert(Subject::Config, refusal.message.clone());
                report.errors.push(refusal);
                None
            }
        };
        let next = next.or_else(|| self.swap_policies_alone(&snapshot, &old, &mut outcome, &mut report));
        // A stand-in's refusal stands until a version loads, though its unchanged file is not tried again.
        for (name, policy) in &next.as_ref().unwrap_or(&*old).policies {
            if let Some(refusal) = policy.refusal() {
                outcome.errors.entry(Subject::Policy(name.clone())).or_insert_with(|| refusal.to_string());
            }
        }
        outcome.last_reload = Some(SystemTime::now());
        // Refusals first: a reader never sees a new version next to the refusal it replaced.
        self.outcome.store(Arc::new(outcome));
        if let Some(generation) = next {
            report.generation = generation.number;
            self.publish(generation);
        }
        let took = started.elapsed();
        let reasons: Vec<&str> = report.errors.iter().map(|refusal| refusal.reason.as_str()).collect();
        self.reload_metrics.reloaded(report.result(), &reasons, took);
        if report.errors.is_empty() {
            tracing::info!(generation = report.generation, swapped = ?report.swapped, config_swapped = report.config_swapped, took_ms = took.as_secs_f64() * 1e3, "policies reloaded");
        } else {
            for refusal in &report.errors {
                tracing::warn!(generation = report.generation, reason = refusal.reason.as_str(), error = %refusal.message, "reload refused; the last good version keeps serving");
            }
        }
        report
    }

    /// The configuration stays; each policy whose file changed swaps alone or keeps its last good version.
    fn swap_policies_alone(&self, snapshot: &SourceSnapshot, old: &Generation, outcome: &mut Outcome, report: &mut ReloadReport) -> Option<Generation> {
        let (policies, swapped, errors) = self.build_policies(&old.config, snapshot, old);
        for name in old.config.policy_names() {
            match errors.iter().find(|(refused, _)| *refused == name) {
                Some((_, refusal)) => outcome.errors.insert(Subject::Policy(name), refusal.message.clone()),
                None => outcome.errors.remove(&Subject::Policy(name)),
            };
        }
        report.errors.extend(errors.into_iter().map(|(_, refusal)| refusal));
        if swapped.is_empty() {
            return None;
        }
        // Every new version was checked to serve its users' kinds, so this only fails on a defect: refuse then.
        match resolve(&old.config, &policies) {
            Ok(plans) => {
                report.swapped = swapped;
                Some(Generation { number: old.number + 1, config: old.config.clone(), policies, plans })
            }
            Err(error) => {
                let refusal = Refusal::new(RefusalReason::Kinds, format!("{error:#}; nothing swapped"));
                for name in swapped {
                    outcome.errors.insert(Subject::Policy(name), refusal.message.clone());
                }
                report.errors.push(refusal);
                None
            }
        }
    }

    fn config_refused(&self, reason: impl std::fmt::Display) -> String {
        let file = self.config_path.as_ref().map_or_else(|| "(built in)".into(), |path| path.display().to_string());
        format!("configuration {file} refused, the previous one keeps serving: {reason}")
    }

    /// The configuration file's new contents, if they parse and differ from what serves.
    fn changed_config(&self, snapshot: &SourceSnapshot, old: &Generation) -> Result<Option<HostConfig>, Refusal> {
        let Some(text) = &snapshot.config else { return Ok(None) };
        let refused = |reason: RefusalReason, message: String| Refusal::new(reason, self.config_refused(message));
        let text = text.clone().map_err(|message| refused(RefusalReason::Unreadable, message))?;
        let parsed = match &self.config_path {
            Some(path) => HostConfig::parse_at(&text, path),
            None => HostConfig::parse(&text),
        };
        let config = parsed.map_err(|error| refused(RefusalReason::Config, format!("{error:#}")))?;
        if config == old.config {
            return Ok(None);
        }
        if config.policy_dir != old.config.policy_dir {
            let message = format!(
                "policyDir changed from {} to {}: the policy directory is fixed at start; restart to change it",
                old.config.policy_dir.display(),
                config.policy_dir.display()
            );
            return Err(refused(RefusalReason::Config, message));
        }
        if config.leader_election != old.config.leader_election {
            tracing::warn!("leaderElection changed: it takes effect at the next restart");
        }
        Ok(Some(config))
    }

    /// A generation for a new configuration, or the first refusal (then none of it serves).
    fn build_generation(&self, config: &HostConfig, snapshot: &SourceSnapshot, old: &Generation) -> Result<(Generation, Vec<String>), Refusal> {
        let (policies, swapped, errors) = self.build_policies(config, snapshot, old);
        if let Some((_, first)) = errors.first() {
            let messages: Vec<&str> = errors.iter().map(|(_, refusal)| refusal.message.as_str()).collect();
            return Err(Refusal::new(first.reason, messages.join("; ")));
        }
        let plans = resolve(config, &policies).map_err(|error| Refusal::new(RefusalReason::Config, format!("{error:#}")))?;
        Ok((Generation { number: old.number + 1, config: config.clone(), policies, plans }, swapped))
    }

    /// Every policy `config` names: the serving version when neither its file, its options nor its signer changed,
    /// else a new load whose signature checked (before anything of it is compiled) and that passed the canary and
    /// serves its users' kinds, else (with the refusal) the serving version if any.
    fn build_policies(&self, config: &HostConfig, snapshot: &SourceSnapshot, old: &Generation) -> BuiltPolicies {
        let (mut policies, mut swapped, mut errors) = (BTreeMap::new(), Vec::new(), Vec::new());
        let keys: KeyRing = config.key_files().into_iter().map(|path| (path.to_path_buf(), PublicKey::read(path))).collect();
        for (name, users) in config.policy_users() {
            let options = options_for(config, &name);
            let serving = old.policies.get(&name);
            let used_by = describe_users(&users);
            let pulled;
            let file = match config.policies.get(&name).and_then(|policy| policy.source.as_deref()) {
                Some(source) => match self.remote.get(source, &config.registries.options()) {
                    Ok((artifact, reported)) => {
                        let mut file = PolicyFile::new(PathBuf::from(reported), artifact.component.clone());
                        file.artifact = Some(artifact);
                        pulled = file;
                        Some(&pulled)
                    }
                    Err(error) => {
                        self.remote.failed(true);
                        let message = match serving {
                            Some(serving) => format!("policy {name}: {error}; {}", still_serving(serving)),
                            None => format!("policy {name}: {error} (used by {used_by})"),
                        };
                        errors.push((name.clone(), Refusal::new(RefusalReason::Registry, message)));
                        if let Some(serving) = serving {
                            policies.insert(name, serving.clone());
                        }
                        continue;
                    }
                },
                None => snapshot.policies.get(&name),
            };
            let Some(file) = file else {
                let path = config.policy_dir.join(format!("{name}.wasm"));
                // A file that is there but damaged is said as such, not as a removal.
                let (reason, what) = match snapshot.failed.get(&name) {
                    Some(failure) => (RefusalReason::Unreadable, failure.clone()),
                    None if serving.is_some() => (RefusalReason::Missing, format!("{} was removed", path.display())),
                    None => (RefusalReason::Missing, format!("{} does not exist", path.display())),
                };
                let message = match serving {
                    Some(serving) => format!("policy {name}: {what}, but {used_by} uses it; {}", still_serving(serving)),
                    None => format!("policy {name}: {what} (used by {used_by})"),
                };
                errors.push((name.clone(), Refusal::new(reason, message)));
                if let Some(serving) = serving {
                    policies.insert(name, serving.clone());
                }
                continue;
            };
            let checked = signer_of(file, config.verification_for(&name), &keys).inspect_err(|_| {
                // An artifact whose signatures did not check is pulled again at the next rescan: a signature may be
                // attached after the push, or with a new key.
                if let (Some(artifact), Some(source)) = (&file.artifact, config.policies.get(&name).and_then(|policy| policy.source.as_deref())) {
                    self.remote.forget(source, &artifact.digest);
                }
            });
            let loaded = checked.and_then(|signed_by| {
                // An OCI source too: a tag resolved to the digest that serves is reported as such. (A file moved
                // into a bundle keeps serving as it was: same bytes, nothing to swap.)
                let same_source = |serving: &LoadedPolicy| file.artifact.is_none() || serving.source == file.path.display().to_string();
                let unchanged = |serving: &&Arc<LoadedPolicy>| {
                    serving.digest == file.digest && serving.options == options && serving.signed_by == signed_by && same_source(serving)
                };
                match serving.filter(unchanged) {
                    Some(serving) => Ok(serving.clone()),
                    None => self.load_and_canary(&name, file, options.clone(), &users).map(|mut policy| {
                        policy.signed_by = signed_by;
                        swapped.push(name.clone());
                        Arc::new(policy)
                    }),
                }
            });
            match loaded {
                Ok(policy) => {
                    policies.insert(name, policy);
                }
                Err(mut refusal) => {
                    if let Some(serving) = serving {
                        refusal.message = format!("{}; {}", refusal.message, still_serving(serving));
                        policies.insert(name.clone(), serving.clone());
                    }
                    errors.push((name, refusal));
                }
            }
        }
        (policies, swapped, errors)
    }

    fn load_and_canary(&self, name: &str, file: &PolicyFile, options: PolicyOptions, users: &[crate::config::PolicyUser]) -> Result<LoadedPolicy, Refusal> {
        let source = file.path.display().to_string();
        let policy = LoadedPolicy::load_as(&self.runtime, &source, &file.bytes, options, Some(name)).map_err(|error| {
            let reason = if error.name_mismatch { RefusalReason::NameMismatch } else { RefusalReason::InvalidPolicy };
            Refusal::new(reason, error.to_string())
        })?;
        if let Some(missing) = plans::kinds_missing(&policy, users) {
            return Err(Refusal::new(RefusalReason::Kinds, format!("policy {source}: {missing}")));
        }
        canary::check(&policy, self.live.get().map(|live| &**live))
            .map_err(|(kind, error)| Refusal::new(RefusalReason::Canary, format!("policy {source}: canary {kind} call failed: {error}")))?;
        policy.report_to(self.call_metrics.clone());
        Ok(policy)
    }

    fn publish(&self, generation: Generation) {
        let pulled: Vec<&str> = generation
            .policies
            .values()
            .filter_map(|policy| policy.source.strip_prefix(crate::oci::SCHEME)?.rsplit_once('@').map(|(_, digest)| digest))
            .collect();
        self.remote.retain(&pulled);
        let versions = generation.policies.values().map(|policy| PolicyInfoLabels {
            policy: policy.name().to_string(),
            version: policy.descriptor.version.clone(),
            sha256: policy.digest.clone(),
        });
        self.reload_metrics.serving(generation.number, versions);
        let configured: usize = generation.policies.values().map(|policy| policy.worst_case_memory_bytes()).sum();
        let budget = self.runtime.guest_memory().budget();
        tracing::info!(
            generation = generation.number,
            policies = generation.policies.len(),
            instances_per_policy = crate::policy::max_instances(),
            configured_mib = configured >> 20,
            budget_mib = budget.map(|budget| budget >> 20),
            "policy sandboxes can take at most the smaller of these together (memoryMib x instances over every policy, and the host's guest memory budget)"
        );
        self.current.store(Arc::new(generation));
    }

    /// What serves, with the last refusal of each policy and of the configuration. Never waits for a reload in
    /// progress: it shows the last finished one.
    pub fn status(&self) -> RegistryStatus {
        let generation = self.current();
        let outcome = self.outcome.load();
        let timestamp = |time: SystemTime| jiff::Timestamp::try_from(time).map(|t| t.to_string()).unwrap_or_default();
        let config = &generation.config;
        RegistryStatus {
            generation: generation.number,
            policy_dir: config.policy_dir.display().to_string(),
            config_file: self.config_path.as_ref().map(|path| path.display().to_string()),
            config_error: outcome.errors.get(&Subject::Config).cloned(),
            last_reload: outcome.last_reload.map(timestamp),
            policies: generation
                .policies
                .values()
                .map(|policy| PolicyStatus {
                    name: policy.name().to_string(),
                    version: policy.descriptor.version.clone(),
                    sha256: policy.digest.clone(),
                    size: policy.size,
                    source: policy.source.clone(),
                    kinds: policy.descriptor.kinds.iter().map(|kind| kind.as_str()).collect(),
                    used_by: config.users_of(policy.name()).iter().map(ToString::to_string).collect(),
                    loaded_at: timestamp(policy.loaded_at),
                    loaded: policy.refusal().is_none(),
                    memory_bytes: policy.memory_in_use(),
                    breaker: policy.breaker_status(),
                    signed_by: policy.signed_by.clone(),
                    last_error: outcome.errors.get(&Subject::Policy(policy.name().to_string())).cloned(),
                })
                .collect(),
            profiles: config
                .scheduler
                .profiles
                .iter()
                .map(|profile| ProfileStatus {
                    scheduler_name: profile.scheduler_name.clone(),
                    filters: profile.filters.clone(),
                    scores: profile.scores.iter().map(|score| (score.policy.clone(), score.weight)).collect(),
                })
                .collect(),
            rescheduler_strategies: config.rescheduler.iter().flat_map(|section| section.strategies.iter().map(|strategy| strategy.policy.clone())).collect(),
            preemption_policy: config.rescheduler.as_ref().and_then(|section| section.preemption.as_ref()).map(|strategy| strategy.policy.clone()),
            autoscaler_policies: config.autoscaler.iter().flat_map(|section| section.policies.clone()).collect(),
        }
    }
}
