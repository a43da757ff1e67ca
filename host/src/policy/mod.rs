//! Policies: a component validated and configured once ([`LoadedPolicy::load`]), then called through a pool of
//! sandboxed instances kept in sync with the cluster. When a call fails, the policy's [`FailureMode`] decides
//! what the caller sees, and the host goes on.

pub mod breaker;
mod load;
pub mod metrics;

mod scheduling;

pub use load::{check_binary_kind, LoadError};
pub use scheduling::SchedulingPolicy;

use crate::cluster::{ClusterState, DeltaSink, Rewind, SyncPoint};
use crate::contract::types::{ClusterDelta, Descriptor, Eviction, FilterResult, Placement, Pod, PolicyKind, ScaleDecision, ScaleRequest};
use crate::contract::{EvictContext, PolicyComponentPre};
use crate::runtime::{CacheOutcome, CallError, Limits, PolicyInstance, Runtime};
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

/// What a caller sees when a policy call fails (trap, timeout, out of memory, error, malformed answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureMode {
    /// Filters reject every candidate; scores, evictions and scaling take no action.
    #[default]
    FailClosed,
    /// The policy is skipped: filters pass every candidate; the others take no action.
    FailOpen,
}

/// How a policy is run: its settings (JSON), sandbox limits and failure mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyOptions {
    pub settings: String,
    pub limits: Limits,
    pub failure_mode: FailureMode,
}

pub struct LoadedPolicy {
    /// Where the bytes came from (a file path), for messages.
    pub source: String,
    pub descriptor: Descriptor,
    pub contract_version: String,
    /// sha256 of the component, hex.
    pub digest: String,
    pub size: usize,
    pub cache: CacheOutcome,
    pub options: PolicyOptions,
    /// The label keys its settings name (its `configure` answer): views with `selected` labels keep them.
    pub settings_label_keys: Vec<String>,
    pub loaded_at: SystemTime,
    /// The key that signed this component, when the registry checked (see `registry::signature`).
    pub signed_by: Option<String>,
    name: Arc<str>,
    runtime: Arc<Runtime>,
    code: Code,
    pool: Mutex<Pool>,
    /// Signalled when an instance goes back to the pool or is discarded.
    returned: Condvar,
    /// The last failure logged at warning level: a policy failing the same way on every pod is logged once,
    /// then at debug level until the failure changes.
    last_failure: Mutex<String>,
    metrics: OnceLock<Arc<metrics::PolicyMetrics>>,
    /// Takes the policy out of calls after failures in a row.
    breaker: breaker::Breaker,
    /// Bytes of linear memory and tables over all live instances.
    memory_in_use: Gauge,
}

/// What a policy's instances are made from.
enum Code {
    Compiled(PolicyComponentPre<crate::runtime::InstanceState>),
    /// Nothing: no version of the policy has loaded since the host started ([`LoadedPolicy::stand_in`]), for
    /// this reason. Every call fails with it and the failure mode answers.
    Refused(String),
}

/// A policy's instances: idle ones, and how many exist (idle or in a call), never more than
/// [`max_instances`], so the host's worst-case memory is known from the configuration.
struct Pool {
    idle: Vec<SyncedInstance>,
    live: usize,
}

/// A place in a policy's pool held by a call; given back when dropped (the instance failed or the call panicked).
struct Slot<'a> {
    policy: &'a LoadedPolicy,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.policy.discard();
    }
}

/// An instance synced with a cluster state, waiting for its call ([`LoadedPolicy::prepare`]).
pub struct Prepared<'a> {
    slot: Slot<'a>,
    instance: SyncedInstance,
}

impl Prepared<'_> {
    /// Runs `body`; the instance goes back to the pool unless the call poisoned it.
    fn call<R>(mut self, body: impl FnOnce(&mut PolicyInstance) -> Result<R, CallError>) -> Result<R, CallError> {
        let result = body(&mut self.instance.instance);
        let policy = self.slot.policy;
        match &result {
            Err(error) if error.poisons_instance() || self.instance.instance.is_poisoned() => {
                tracing::debug!(policy = %policy.name, %error, "discarding policy instance");
            }
            _ => {
                std::mem::forget(self.slot);
                policy.lock_pool().idle.push(self.instance);
                policy.returned.notify_one();
            }
        }
        result
    }

    /// Gives the instance back to the pool without a call, synced.
    pub fn release(self) {
        let _ = self.call(|_| Ok(()));
    }

    /// Evictions proposed on the state the instance was synced with; `cluster` must be that state (or a fork
    /// of it taken at the same moment), to check the answer against. See [`LoadedPolicy::propose`].
    pub fn propose(self, cluster: &ClusterState, context: &EvictContext) -> Result<Vec<Eviction>, CallError> {
        let policy = self.slot.policy;
        let started = Instant::now();
        let result = self.call(|instance| checked_proposals(instance.propose(context, proposable_pods(cluster, context))?, cluster, context));
        if let Some(metrics) = policy.metrics.get() {
            metrics.observe(&policy.name, "propose", started.elapsed(), result.is_err());
        }
        result
    }
}

/// Instances of one policy at once: one per filtering thread, and one each for the other loops.
pub fn max_instances() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) + 2
}

/// An instance and where its own view of the cluster stands: which state's log it follows, and how far.
pub struct SyncedInstance {
    pub instance: PolicyInstance,
    synced_to: Option<SyncPoint>,
    /// The way back when it follows a fork (a what-if copy of the cluster).
    rewind: Option<Rewind>,
}

impl SyncedInstance {
    fn new(instance: PolicyInstance) -> Self {
        SyncedInstance { instance, synced_to: None, rewind: None }
    }
}

impl DeltaSink for SyncedInstance {
    type Error = CallError;

    fn synced_to(&self) -> Option<SyncPoint> {
        self.synced_to
    }

    fn set_synced_to(&mut self, point: SyncPoint) {
        self.synced_to = Some(point);
    }

    fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), CallError> {
        self.instance.apply(deltas)
    }

    fn keep_rewind(&mut self, rewind: Option<Rewind>) {
        self.rewind = rewind;
    }

    fn take_rewind(&mut self) -> Option<Rewind> {
        self.rewind.take()
    }
}

impl LoadedPolicy {
    /// Compiles (or takes from the cache), checks the contract version and exports, asks the component to
    /// describe itself and configures one instance with `options.settings`. Any failure names `source`.
    pub fn load(runtime: &Arc<Runtime>, source: &str, wasm: &[u8], options: PolicyOptions) -> Result<Self, LoadError> {
        Self::load_as(runtime, source, wasm, options, None)
    }

    /// [`load`](Self::load), refusing a component that does not call itself `expected_name` before its settings
    /// are tried: another policy's file copied over this one is named as such, not as settings it rejects.
    pub fn load_as(runtime: &Arc<Runtime>, source: &str, wasm: &[u8], options: PolicyOptions, expected_name: Option<&str>) -> Result<Self, LoadError> {
        let fail = |reason: String| LoadError::new(source, reason);
        check_binary_kind(wasm).map_err(fail)?;
        let digest = hex::encode(Sha256::digest(wasm));
        let (component, cache) = runtime.compile(&digest, wasm).map_err(|error| fail(format!("does not compile: {error:#}")))?;
        // From here the cache counts this load as a user of the component: a failure gives it back.
        Self::configure_compiled(runtime, source, wasm, digest.clone(), component, cache, options, expected_name).inspect_err(|_| runtime.release(&digest))
    }

    #[allow(clippy::too_many_arguments)]
    fn configure_compiled(
        runtime: &Arc<Runtime>,
        source: &str,
        wasm: &[u8],
        digest: String,
        component: wasmtime::component::Component,
        cache: CacheOutcome,
        options: PolicyOptions,
        expected_name: Option<&str>,
    ) -> Result<Self, LoadError> {
        let fail = |reason: String| LoadError::new(source, reason);
        let contract_version = load::check_contract(runtime.engine(), &component).map_err(fail)?;
        let instance_pre =
            runtime.linker().instantiate_pre(&component).map_err(|error| fail(format!("imports something the host does not provide: {error:#}")))?;
        let pre = PolicyComponentPre::new(instance_pre).map_err(|error| fail(format!("exports do not match the contract: {error:#}")))?;

        let provisional_name: Arc<str> = Arc::from(source);
        let memory_in_use = Gauge::default();
        let mut instance =
            PolicyInstance::instantiate(runtime, &pre, &provisional_name, options.limits, &memory_in_use).map_err(|error| fail(error.to_string()))?;
        let descriptor = instance.describe().map_err(|error| fail(error.to_string()))?;
        load::check_descriptor(&descriptor).map_err(fail)?;
        if let Some(expected) = expected_name.filter(|expected| *expected != descriptor.name) {
            let reason = format!("the component calls itself {:?}, but the file name loads it as {expected:?}", descriptor.name);
            return Err(LoadError { name_mismatch: true, ..LoadError::new(source, reason) });
        }
        let settings_label_keys = instance.configure(&options.settings).map_err(|error| fail(format!("settings rejected: {error}")))?;

        let name: Arc<str> = Arc::from(descriptor.name.as_str());
        tracing::info!(policy = %name, version = %descriptor.version, source, digest = &digest[..12], ?cache, "policy loaded");
        Ok(LoadedPolicy {
            source: source.to_string(),
            descriptor,
            contract_version,
            digest,
            size: wasm.len(),
            cache,
            options,
            settings_label_keys,
            loaded_at: SystemTime::now(),
            signed_by: None,
            name,
            runtime: runtime.clone(),
            code: Code::Compiled(pre),
            pool: Mutex::new(Pool { idle: vec![SyncedInstance::new(instance)], live: 1 }),
            returned: Condvar::new(),
            last_failure: Mutex::new(String::new()),
            metrics: OnceLock::new(),
            breaker: breaker::Breaker::default(),
            memory_in_use,
        })
    }

    /// What serves for a policy whose file is there but refused (it does not compile, its settings are rejected,
    /// its signature does not check, its canary fails) when the host starts, with no earlier version to keep: a
    /// policy that implements what its users need (`kinds`) and fails every call with `reason`, so its failure
    /// mode answers for it (a fail-closed filter rejects every node and says why; a fail-open one is skipped) and
    /// the host serves everything else. The next version that loads swaps in as any new version does. `digest`
    /// and `size` are the refused file's: the same file is not compiled again.
    #[allow(clippy::too_many_arguments)]
    pub fn stand_in(
        runtime: &Arc<Runtime>,
        name: &str,
        source: &str,
        digest: String,
        size: usize,
        kinds: Vec<PolicyKind>,
        options: PolicyOptions,
        reason: String,
    ) -> LoadedPolicy {
        use crate::contract::types::{LabelScope, NodeFacts, PodFacts, ViewScope};
        let pod_facts = PodFacts { labels: LabelScope::None, containers: false, images: false, placement: false, pod_affinity: false, host_ports: false };
        let node_facts = NodeFacts { labels: false, taints: false, conditions: false, images: false };
        let descriptor = Descriptor {
            name: name.to_string(),
            version: "none".into(),
            kinds,
            view: ViewScope::Nodes,
            pod_facts,
            node_facts,
            default_settings: "{}".into(),
            settings_doc: String::new(),
        };
        LoadedPolicy {
            source: source.to_string(),
            descriptor,
            contract_version: String::new(),
            digest,
            size,
            cache: CacheOutcome::Compiled,
            options,
            settings_label_keys: Vec::new(),
            loaded_at: SystemTime::now(),
            signed_by: None,
            name: Arc::from(name),
            runtime: runtime.clone(),
            code: Code::Refused(reason),
            pool: Mutex::new(Pool { idle: Vec::new(), live: 0 }),
            returned: Condvar::new(),
            last_failure: Mutex::new(String::new()),
            metrics: OnceLock::new(),
            breaker: breaker::Breaker::default(),
            memory_in_use: Gauge::default(),
        }
    }

    /// Why no version of it serves, for a [stand-in](Self::stand_in).
    pub fn refusal(&self) -> Option<&str> {
        match &self.code {
            Code::Compiled(_) => None,
            Code::Refused(reason) => Some(reason),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reports every call's latency and failures from now on.
    pub fn report_to(&self, metrics: Arc<metrics::PolicyMetrics>) {
        let _ = self.metrics.set(metrics);
    }

    pub fn implements(&self, kind: PolicyKind) -> bool {
        self.descriptor.kinds.contains(&kind)
    }

    /// Runs `body` on an idle instance (or a new one), after syncing it with `cluster`. An instance that failed
    /// is dropped instead of going back to the pool, so the next call gets a fresh one.
    fn with_instance<R>(
        &self,
        cluster: &ClusterState,
        operation: &'static str,
        subject: Option<&Pod>,
        body: impl FnOnce(&mut PolicyInstance) -> Result<R, CallError>,
    ) -> Result<R, CallError> {
        let started = Instant::now();
        let now = crate::clock::instant();
        if let Err(open) = self.breaker.admit(now) {
            if let Some(metrics) = self.metrics.get() {
                metrics.short_circuited(&self.name, operation);
            }
            let failures = self.breaker.status(now).failures_in_a_row;
            return Err(CallError::CircuitOpen { operation, failures, retry_in_seconds: open.remaining.as_secs() });
        }
        let unselected = subject.map(|pod| self.unselected_keys(cluster, pod)).unwrap_or_default();
        let result = self.prepare_with(cluster, unselected).and_then(|prepared| prepared.call(body));
        if let Some(metrics) = self.metrics.get() {
            metrics.observe(&self.name, operation, started.elapsed(), result.is_err());
        }
        self.note_outcome(operation, result.as_ref().err());
        result
    }

    /// Tells the breaker how a call it let through ended; a trip is logged and reported.
    fn note_outcome(&self, operation: &str, error: Option<&CallError>) {
        match self.breaker.record(error.is_none(), crate::clock::instant()) {
            breaker::Change::Tripped(cooldown) => {
                let error = error.map(ToString::to_string).unwrap_or_default();
                let message = format!(
                    "policy {} failed {} calls in a row (the last: {operation}: {error}); its failure mode ({:?}) answers for it for {} without calling it, then one call tries",
                    self.name,
                    self.breaker.status(crate::clock::instant()).failures_in_a_row,
                    self.options.failure_mode,
                    humantime::format_duration(cooldown)
                );
                tracing::warn!(policy = %self.name, operation, %error, cooldown = %humantime::format_duration(cooldown), "circuit breaker opened");
                if let Some(metrics) = self.metrics.get() {
                    metrics.tripped(metrics::Trip { policy: self.name.to_string(), message, cooldown });
                }
            }
            breaker::Change::Closed => tracing::info!(policy = %self.name, operation, "circuit breaker closed: the policy answered again"),
            breaker::Change::None => {}
        }
    }

    /// Where its circuit breaker stands.
    pub fn breaker_status(&self) -> breaker::BreakerStatus {
        self.breaker.status(crate::clock::instant())
    }

    pub fn circuit_open(&self) -> bool {
        self.breaker.is_open(crate::clock::instant())
    }

    /// Brings up to `count` pooled instances to `cluster`'s head without a call: a fork taken right after can
    /// then be followed with its own few deltas (and left with a rewind) instead of a snapshot per instance.
    /// Stops when the pool is full rather than wait for an instance another loop holds (the caller holds the
    /// live state's read lock).
    pub fn warm(&self, cluster: &ClusterState, count: usize) {
        let mut prepared = Vec::new();
        for _ in 0..count {
            let room = {
                let pool = self.lock_pool();
                !pool.idle.is_empty() || pool.live < max_instances()
            };
            if !room {
                break;
            }
            prepared.extend(self.prepare(cluster).ok());
        }
        prepared.into_iter().for_each(Prepared::release);
    }

    /// Drops idle instances, the longest idle first, until at most `count` are live: those another loop made
    /// while the usual caller held the others (a rescheduling run's fit check during a scheduling burst) would
    /// otherwise keep their copy of the cluster for good.
    pub fn keep_at_most(&self, count: usize) {
        let dropped: Vec<SyncedInstance> = {
            let mut pool = self.lock_pool();
            let extra = pool.live.saturating_sub(count).min(pool.idle.len());
            pool.live -= extra;
            pool.idle.drain(..extra).collect()
        };
        // Unmapping their memory happens outside the pool's lock.
        drop(dropped);
    }

    /// Drops the idle instances, and their copy of the cluster, for a policy used only now and then.
    pub fn release_idle(&self) {
        let dropped = {
            let mut pool = self.lock_pool();
            pool.live -= pool.idle.len();
            std::mem::take(&mut pool.idle)
        };
        drop(dropped);
    }

    /// An instance from the pool (or a new one), synced with `cluster` now and called later: the caller may let
    /// go of `cluster` (a read lock on the live state, say) in between.
    pub fn prepare(&self, cluster: &ClusterState) -> Result<Prepared<'_>, CallError> {
        self.prepare_with(cluster, Vec::new())
    }

    /// The label keys `subject`'s selectors name that neither `cluster` nor the settings select, for a policy
    /// that keeps selected labels: a state that was never told the pod waits (a command's one-off cluster, a
    /// test) would leave them out of the view the policy decides on.
    fn unselected_keys(&self, cluster: &ClusterState, subject: &Pod) -> Vec<String> {
        if self.descriptor.pod_facts.labels != crate::contract::types::LabelScope::Selected
            || self.descriptor.view != crate::contract::types::ViewScope::NodesAndPods
        {
            return Vec::new();
        }
        let mut keys = crate::cluster::named_keys(subject);
        keys.retain(|key| !cluster.selected_keys().contains(key) && !self.settings_label_keys.contains(key));
        keys
    }

    /// [`prepare`](Self::prepare); with `unselected` keys, the instance is synced from a snapshot that keeps those
    /// labels too (it keeps them after the call: labels nothing selects change no answer).
    fn prepare_with(&self, cluster: &ClusterState, unselected: Vec<String>) -> Result<Prepared<'_>, CallError> {
        let snapshot = !unselected.is_empty();
        let keys: std::borrow::Cow<'_, [String]> = match snapshot {
            false => std::borrow::Cow::Borrowed(&self.settings_label_keys),
            true => self.settings_label_keys.iter().cloned().chain(unselected).collect(),
        };
        let view = crate::cluster::View::of(&self.descriptor, &keys);
        let taken = self.take(cluster.epoch());
        // Until the instance is back in the pool, it counts as live; if the call fails, panics or the instance
        // cannot be made, the guard gives its place back.
        let slot = Slot { policy: self };
        let mut instance = match taken {
            Some(instance) => instance,
            None => self.new_instance()?,
        };
        if snapshot {
            instance.synced_to = None;
        }
        let reused = instance.synced_to.is_some();
        match cluster.sync(&mut instance, view) {
            Ok(()) => Ok(Prepared { slot, instance }),
            // An instance that cannot follow the changes (its memory filled with what it kept over time, say) is
            // replaced by a fresh one synced from a snapshot, rather than failing this call and the next.
            Err(error) if reused => {
                tracing::warn!(policy = %self.name, %error, "an instance could not follow the cluster's changes; starting a fresh one from a full sync");
                // Counted: a spinning `apply` costs its deadline on every call even when the fresh instance answers.
                if let Some(metrics) = self.metrics.get() {
                    metrics.observe(&self.name, "apply", std::time::Duration::ZERO, true);
                }
                drop(instance);
                let mut fresh = self.new_instance()?;
                cluster.sync(&mut fresh, view).inspect_err(|error| {
                    tracing::debug!(policy = %self.name, %error, "discarding policy instance");
                })?;
                Ok(Prepared { slot, instance: fresh })
            }
            Err(error) => {
                tracing::debug!(policy = %self.name, %error, "discarding policy instance");
                Err(error)
            }
        }
    }

    /// What its instances receive of the cluster: its descriptor's view and facts, and the label keys its
    /// settings name.
    pub fn view(&self) -> crate::cluster::View<'_> {
        crate::cluster::View::of(&self.descriptor, &self.settings_label_keys)
    }

    fn lock_pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An idle instance, preferring one that follows the state of `epoch` (it needs only the deltas it missed,
    /// not a full snapshot); None when the caller may create one; waits when the pool is at its bound.
    fn take(&self, epoch: u64) -> Option<SyncedInstance> {
        let mut pool = self.lock_pool();
        loop {
            let following = pool.idle.iter().rposition(|instance| instance.synced_to.is_some_and(|point| point.epoch == epoch));
            // `remove`, not `swap_remove`: the idle list stays in the order instances came back, longest idle first.
            if let Some(instance) = following.map(|index| pool.idle.remove(index)).or_else(|| pool.idle.pop()) {
                return Some(instance);
            }
            if pool.live < max_instances() {
                pool.live += 1;
                return None;
            }
            pool = self.returned.wait(pool).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    fn log_failure(&self, operation: &str, pod: &Pod, error: &CallError) {
        let pod = format!("{}/{}", pod.namespace, pod.name);
        let message = error.to_string();
        let mut last = self.last_failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if *last == message {
            tracing::debug!(policy = %self.name, %pod, error = %message, operation, "policy failed again");
        } else {
            tracing::warn!(policy = %self.name, %pod, error = %message, operation, mode = ?self.options.failure_mode, "policy failed; its failure mode decides");
            *last = message;
        }
    }

    /// An instance taken from the pool is gone (failed, or never created).
    fn discard(&self) {
        self.lock_pool().live -= 1;
        self.returned.notify_one();
    }

    /// The most memory this policy's instances can take together.
    pub fn worst_case_memory_bytes(&self) -> usize {
        self.options.limits.memory_bytes.saturating_mul(max_instances())
    }

    /// A fresh configured instance, not yet synced with any cluster (the pool makes these on demand; one made
    /// here is the caller's, outside the pool's bound).
    pub fn new_instance(&self) -> Result<SyncedInstance, CallError> {
        let pre = match &self.code {
            Code::Compiled(pre) => pre,
            Code::Refused(reason) => return Err(CallError::NotLoaded(reason.clone())),
        };
        let mut instance = PolicyInstance::instantiate(&self.runtime, pre, &self.name, self.options.limits, &self.memory_in_use)?;
        // The same settings name the same label keys as when the policy was loaded.
        instance.configure(&self.options.settings)?;
        Ok(SyncedInstance::new(instance))
    }

    /// Bytes of guest memory (linear memories and tables) its live instances hold now.
    pub fn memory_in_use(&self) -> u64 {
        self.memory_in_use.get().max(0) as u64
    }

    /// Instances currently idle in the pool.
    pub fn idle_instances(&self) -> usize {
        self.lock_pool().idle.len()
    }

    pub fn filter(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Result<FilterResult, CallError> {
        self.with_instance(cluster, "filter", Some(pod), |instance| instance.filter(pod, candidates))
    }

    /// Filter verdicts with the failure mode applied: never fails.
    pub fn filter_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> FilterResult {
        self.filter(cluster, pod, candidates).unwrap_or_else(|error| {
            self.log_failure("filter", pod, &error);
            match self.options.failure_mode {
                FailureMode::FailOpen => FilterResult { verdicts: vec![0; candidates.len()], rejections: Vec::new() },
                FailureMode::FailClosed => FilterResult { verdicts: vec![1; candidates.len()], rejections: vec![vec![failure_reason(&self.name)]] },
            }
        })
    }

    pub fn score(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Result<Vec<u32>, CallError> {
        self.with_instance(cluster, "score", Some(pod), |instance| instance.score(pod, candidates))
    }

    /// Scores with the failure mode applied: a failed score policy contributes nothing.
    pub fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Vec<u32> {
        self.score(cluster, pod, candidates).unwrap_or_else(|error| {
            self.log_failure("score", pod, &error);
            vec![0; candidates.len()]
        })
    }

    /// Evictions the policy proposes on `cluster` (see [`checked_proposals`] for what is refused).
    pub fn propose(&self, cluster: &ClusterState, context: &EvictContext) -> Result<Vec<Eviction>, CallError> {
        self.with_instance(cluster, "propose", None, |instance| {
            checked_proposals(instance.propose(context, proposable_pods(cluster, context))?, cluster, context)
        })
    }

    pub fn recommend(&self, cluster: &ClusterState, request: &ScaleRequest) -> Result<ScaleDecision, CallError> {
        self.recommend_with_settings(cluster, request, None)
    }

    /// A recommendation under `settings` (an Autoscaler's own) instead of the policy's: the instance is
    /// configured with them for this call only, then given its own settings back before it returns to the pool.
    pub fn recommend_with_settings(&self, cluster: &ClusterState, request: &ScaleRequest, settings: Option<&str>) -> Result<ScaleDecision, CallError> {
        self.with_instance(cluster, "recommend", None, |instance| {
            let Some(settings) = settings else { return instance.recommend(request) };
            let configured = instance.configure(settings).map(drop).map_err(|error| match error {
                CallError::Guest(message) => CallError::Guest(format!("invalid settings: {message}")),
                other => other,
            });
            let decision = configured.and_then(|()| instance.recommend(request));
            // Restored even after a refusal (a component may have half-applied it); an instance left with another
            // caller's settings must not go back to the pool: a trap discards it.
            instance
                .configure(&self.options.settings)
                .map(drop)
                .map_err(|error| CallError::Trap { operation: "configure", message: format!("could not restore the policy's own settings: {error}") })?;
            decision
        })
    }
}

/// The pods a `propose` answer may name: the cluster's, and the failed pods the context carries.
fn proposable_pods(cluster: &ClusterState, context: &EvictContext) -> usize {
    cluster.pod_count() + context.failed.len()
}

/// An evict answer, checked against the state it was proposed on: naming a pod the cluster does not have,
/// naming one twice, longer than the cluster's pods, making room for a pod that is not pending, or placing a
/// replacement on a node the cluster does not have is malformed, and nothing of it is used.
pub fn checked_proposals(evictions: Vec<Eviction>, cluster: &ClusterState, context: &EvictContext) -> Result<Vec<Eviction>, CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation: "propose", message });
    let pods = proposable_pods(cluster, context);
    if evictions.len() > pods {
        return malformed(format!("{} evictions proposed for a cluster of {pods} pods", evictions.len()));
    }
    let mut seen = std::collections::HashSet::with_capacity(evictions.len());
    for eviction in &evictions {
        if cluster.pod_by_id(eviction.pod).is_none() && cluster.failed_by_id(eviction.pod).is_none() {
            return malformed(format!("pod id {} is not a pod of the cluster", eviction.pod));
        }
        if !seen.insert(eviction.pod) {
            return malformed(format!("pod id {} is proposed twice", eviction.pod));
        }
        if let Some(uid) = eviction.room_for.as_deref().filter(|uid| !context.pending.iter().any(|pending| pending.pod.uid == *uid)) {
            return malformed(format!("room-for names {:?}, which is not a pending pod", truncated(uid)));
        }
        if let Some(Placement::RequiredNode(node) | Placement::PreferredNode(node)) = &eviction.placement {
            if cluster.node_id(node).is_none() {
                return malformed(format!("placement names node {:?}, which the cluster does not have", truncated(node)));
            }
        }
    }
    Ok(evictions)
}

/// The rejection a fail-closed policy's failure mode gives every node: the policy failed rather than judged.
pub fn failure_reason(policy: &str) -> String {
    format!("policy {policy} failed")
}

/// Whether a rejection is a failure mode's ([`failure_reason`]) rather than a policy's judgement.
pub fn is_failure_reason(reason: &str) -> bool {
    reason.strip_prefix("policy ").and_then(|rest| rest.strip_suffix(" failed")).is_some_and(|name| !name.is_empty() && !name.contains(' '))
}

/// A guest's text in a message, at most 64 characters of it.
fn truncated(text: &str) -> String {
    text.chars().take(64).collect()
}

impl Drop for LoadedPolicy {
    fn drop(&mut self) {
        // A stand-in never took the component from the cache.
        if let Code::Compiled(_) = self.code {
            self.runtime.release(&self.digest);
        }
    }
}
