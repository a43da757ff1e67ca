//! Policies: a component validated and configured once ([`LoadedPolicy::load`]), then called through a pool of
//! sandboxed instances kept in sync with the cluster. When a call fails, the policy's [`FailureMode`] decides
//! what the caller sees, and the host goes on.

mod load;
pub mod metrics;

pub use load::{check_binary_kind, LoadError};

use crate::cluster::ClusterState;
use crate::runtime::bindings::types::{
    Descriptor, Eviction, FilterResult, Pod, PolicyKind, ScaleDecision, ScaleRequest,
};
use crate::runtime::bindings::PolicyComponentPre;
use crate::runtime::{CacheOutcome, CallError, Limits, PolicyInstance, Runtime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex, OnceLock};
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
    pub loaded_at: SystemTime,
    name: Arc<str>,
    runtime: Arc<Runtime>,
    pre: PolicyComponentPre<crate::runtime::InstanceState>,
    idle: Mutex<Vec<PolicyInstance>>,
    metrics: OnceLock<Arc<metrics::PolicyMetrics>>,
}

impl LoadedPolicy {
    /// Compiles (or takes from the cache), checks the contract version and exports, asks the component to
    /// describe itself and configures one instance with `options.settings`. Any failure names `source`.
    pub fn load(runtime: &Arc<Runtime>, source: &str, wasm: &[u8], options: PolicyOptions) -> Result<Self, LoadError> {
        let fail = |reason: String| LoadError::new(source, reason);
        check_binary_kind(wasm).map_err(fail)?;
        let digest = hex::encode(Sha256::digest(wasm));
        let (component, cache) =
            runtime.compile(&digest, wasm).map_err(|error| fail(format!("does not compile: {error:#}")))?;
        let contract_version = load::check_contract(runtime.engine(), &component).map_err(fail)?;
        let instance_pre = runtime
            .linker()
            .instantiate_pre(&component)
            .map_err(|error| fail(format!("imports something the host does not provide: {error:#}")))?;
        let pre = PolicyComponentPre::new(instance_pre)
            .map_err(|error| fail(format!("exports do not match the contract: {error:#}")))?;

        let provisional_name: Arc<str> = Arc::from(source);
        let mut instance = PolicyInstance::instantiate(runtime, &pre, &provisional_name, options.limits)
            .map_err(|error| fail(error.to_string()))?;
        let descriptor = instance.describe().map_err(|error| fail(error.to_string()))?;
        load::check_descriptor(&descriptor).map_err(fail)?;
        instance.configure(&options.settings).map_err(|error| fail(format!("settings rejected: {error}")))?;

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
            loaded_at: SystemTime::now(),
            name,
            runtime: runtime.clone(),
            pre,
            idle: Mutex::new(vec![instance]),
            metrics: OnceLock::new(),
        })
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
        operation: &str,
        body: impl FnOnce(&mut PolicyInstance) -> Result<R, CallError>,
    ) -> Result<R, CallError> {
        let started = Instant::now();
        let result = self.call_pooled(cluster, body);
        if let Some(metrics) = self.metrics.get() {
            metrics.observe(&self.name, operation, started.elapsed(), result.is_err());
        }
        result
    }

    fn call_pooled<R>(
        &self,
        cluster: &ClusterState,
        body: impl FnOnce(&mut PolicyInstance) -> Result<R, CallError>,
    ) -> Result<R, CallError> {
        let pooled = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
        let mut instance = match pooled {
            Some(instance) => instance,
            None => self.new_instance()?,
        };
        let result = cluster.sync(&mut instance, self.descriptor.view).and_then(|()| body(&mut instance));
        match &result {
            Err(error) if error.poisons_instance() || instance.is_poisoned() => {
                tracing::warn!(policy = %self.name, %error, "discarding policy instance");
            }
            _ => self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(instance),
        }
        result
    }

    /// A fresh configured instance, not yet synced with any cluster (the pool makes these on demand).
    pub fn new_instance(&self) -> Result<PolicyInstance, CallError> {
        let mut instance = PolicyInstance::instantiate(&self.runtime, &self.pre, &self.name, self.options.limits)?;
        instance.configure(&self.options.settings)?;
        Ok(instance)
    }

    /// Instances currently idle in the pool.
    pub fn idle_instances(&self) -> usize {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }

    pub fn filter(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Result<FilterResult, CallError> {
        self.with_instance(cluster, "filter", |instance| instance.filter(pod, candidates))
    }

    /// Filter verdicts with the failure mode applied: never fails.
    pub fn filter_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> FilterResult {
        self.filter(cluster, pod, candidates).unwrap_or_else(|error| {
            tracing::warn!(policy = %self.name, pod = %format!("{}/{}", pod.namespace, pod.name), %error, mode = ?self.options.failure_mode, "filter failed");
            match self.options.failure_mode {
                FailureMode::FailOpen => FilterResult { verdicts: vec![0; candidates.len()], rejections: Vec::new() },
                FailureMode::FailClosed => FilterResult {
                    verdicts: vec![1; candidates.len()],
                    rejections: vec![vec![format!("policy {} failed", self.name)]],
                },
            }
        })
    }

    pub fn score(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Result<Vec<u32>, CallError> {
        self.with_instance(cluster, "score", |instance| instance.score(pod, candidates))
    }

    /// Scores with the failure mode applied: a failed score policy contributes nothing.
    pub fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[u32]) -> Vec<u32> {
        self.score(cluster, pod, candidates).unwrap_or_else(|error| {
            tracing::warn!(policy = %self.name, pod = %format!("{}/{}", pod.namespace, pod.name), %error, "score failed; skipping");
            vec![0; candidates.len()]
        })
    }

    pub fn propose(&self, cluster: &ClusterState) -> Result<Vec<Eviction>, CallError> {
        self.with_instance(cluster, "propose", |instance| instance.propose())
    }

    pub fn recommend(&self, cluster: &ClusterState, request: &ScaleRequest) -> Result<ScaleDecision, CallError> {
        self.with_instance(cluster, "recommend", |instance| instance.recommend(request))
    }
}

impl Drop for LoadedPolicy {
    fn drop(&mut self) {
        self.runtime.forget(&self.digest);
    }
}
