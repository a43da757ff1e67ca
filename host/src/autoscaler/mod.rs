//! The autoscaler loop: sets the replica count of every workload an [`Autoscaler`](resource::Autoscaler)
//! targets. A WASM scale policy recommends; the host keeps the HPA's safety rules, which no policy can bypass.
//!
//! - [`resource`]: the `Autoscaler` custom resource and its generated CRD.
//! - [`metrics_source`]: reads the metrics APIs and classifies pods by the HPA's rules.
//! - [`behavior`]: stabilization windows, rate limits and `[min, max]`, with the HPA's defaults and reasons.
//! - [`metrics`]: the autoscaler's metric families.
//!
//! Every `syncPeriod` a pass reconciles each Autoscaler: read the target's `scale`, its pods and metrics, ask
//! the policy, hold the answer to the behavior, change the replicas through the `scale` subresource with the
//! resourceVersion it read, and write the status (with the recommendations and scale events the behavior needs,
//! so a restart or a failover forgets nothing). A workload that a HorizontalPodAutoscaler also scales is left
//! alone, with a condition and an event.

pub mod behavior;
pub mod metrics;
pub mod metrics_source;
pub mod resource;

use crate::cluster::{ScaledPod, SharedCluster};
use crate::config::AutoscalerSection;
use crate::contract::types::{MetricSample, Recommendation, ScaleDecision, ScaleRequest};
use crate::explain::{DecisionRecords, MetricLine, ScaleRecord};
use crate::kube::{ApiClient, EventRecorder, ObjectRef};
use crate::policy::LoadedPolicy;
use crate::registry::{Generation, PolicyRegistry};
use crate::serve::Heartbeat;
use crate::text::truncated;
use behavior::{Behavior, History};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Api;
use metrics_source::{MetricsReader, Readiness};
use resource::{Autoscaler, AutoscalerStatus, DEFAULT_POLICY};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The reporting component of the autoscaler's events.
pub const COMPONENT: &str = "wasp-autoscaler";
/// Readings kept per metric for the policies' trend windows.
const HISTORY_SAMPLES: usize = 30;
/// Autoscalers reconciled at once: each waits on the API server most of its time.
const CONCURRENT_RECONCILES: usize = 16;
/// A policy's reason is kept in the status up to this size.
const MAX_REASON_BYTES: usize = 1024;

/// Counters of what the host sent, whatever the API server answered.
#[derive(Default)]
pub struct Stats {
    pub passes: AtomicU64,
    pub scale_requests: AtomicU64,
    pub policy_nanos: AtomicU64,
}

/// The last pass, as `/policies` and the benchmark report it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassSummary {
    pub finished_at: String,
    pub autoscalers: usize,
    pub scaled: usize,
    pub failed: usize,
    pub duration_ms: u128,
    /// Of which in policy calls; the rest is mostly waiting on the API server.
    pub policy_ms: u128,
}

/// What a pass reads once per namespace for all its Autoscalers, rather than once per Autoscaler: the pods
/// (from the pod informer; each Autoscaler selects its own by its target's selector) and their metrics.
#[derive(Default)]
struct NamespaceReads {
    pods: std::sync::OnceLock<metrics_source::NamespacePods>,
    usage: tokio::sync::OnceCell<Result<HashMap<String, metrics_source::Usage>, String>>,
}

/// What one reconciliation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Unchanged,
    Scaled,
    Failed,
}

pub struct AutoscalerLoop {
    policies: Arc<PolicyRegistry>,
    cluster: Arc<SharedCluster>,
    api: ApiClient,
    events: EventRecorder,
    metrics: metrics::AutoscalerMetrics,
    /// Recent readings per (Autoscaler uid, metric name), for the policies' trend windows.
    samples: Mutex<HashMap<(String, String), VecDeque<MetricSample>>>,
    /// The behavior's history per Autoscaler uid: exact here, a little behind in the status (see
    /// [`behavior::STATUS_TIME_SLACK`]), read from there only after a restart.
    histories: Mutex<HashMap<String, History>>,
    /// Why HorizontalPodAutoscalers could not be listed last time, if they could not.
    hpa_list_error: Mutex<Option<String>>,
    last_pass: Mutex<Option<PassSummary>>,
    /// Busy while a pass is under way (`/healthz`).
    pub heartbeat: Heartbeat,
    pub stats: Stats,
    /// Each Autoscaler's last sync, for `wasp explain autoscaler`.
    records: Arc<DecisionRecords>,
}

/// Sets `kind` to (status, reason, message), keeping the transition time when the status did not change.
fn set_condition(conditions: &mut Vec<HorizontalPodAutoscalerCondition>, kind: &str, status: bool, reason: &str, message: &str, now: Timestamp) {
    let status = if status { "True" } else { "False" }.to_string();
    let transition =
        conditions.iter().find(|condition| condition.type_ == kind && condition.status == status).and_then(|condition| condition.last_transition_time.clone());
    conditions.retain(|condition| condition.type_ != kind);
    conditions.push(HorizontalPodAutoscalerCondition {
        type_: kind.into(),
        status,
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(transition.unwrap_or(Time(now))),
        observed_generation: None,
    });
    let order = |kind: &str| ["AbleToScale", "ScalingActive", "ScalingLimited"].iter().position(|known| *known == kind);
    conditions.sort_by_key(|condition| order(&condition.type_));
}

/// Why the policy holds at `current` replicas while its metrics pull both ways (one proposes more, another fewer),
/// if it does.
fn conflicting_metrics(current: i32, desired: u32, proposals: &[crate::contract::types::MetricProposal]) -> Option<String> {
    let current = u32::try_from(current).ok()?;
    let wants = |keep: &dyn Fn(u32) -> bool| -> Vec<String> {
        proposals.iter().filter(|proposal| keep(proposal.replicas)).map(|proposal| format!("{} wants {}", proposal.metric, proposal.replicas)).collect()
    };
    let (up, down) = (wants(&|replicas| replicas > current), wants(&|replicas| replicas < current));
    (desired == current && !up.is_empty() && !down.is_empty())
        .then(|| format!("metrics disagree ({}; {}): holding at {current} replicas", up.join(", "), down.join(", ")))
}

/// The API the target's `scale` subresource is served by.
fn scale_api(api: &ApiClient, namespace: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(api.client.clone(), namespace, &resource)
}

/// A workload as (namespace, kind, name).
type TargetKey = (String, String, String);

/// Who scales each workload, as read at the start of a pass: the HPAs (or why they could not be listed) and the
/// Autoscalers.
struct TargetOwners {
    hpas: Result<HashMap<TargetKey, String>, String>,
    autoscalers: HashMap<TargetKey, Vec<String>>,
}

/// The names of the Autoscalers of each workload, sorted.
fn autoscalers_by_target(autoscalers: &[Autoscaler]) -> HashMap<TargetKey, Vec<String>> {
    let mut by_target: HashMap<TargetKey, Vec<String>> = HashMap::new();
    for autoscaler in autoscalers {
        let target = &autoscaler.spec.scale_target_ref;
        let key = (autoscaler.metadata.namespace.clone().unwrap_or_default(), target.kind.clone(), target.name.clone());
        by_target.entry(key).or_default().push(autoscaler.metadata.name.clone().unwrap_or_default());
    }
    by_target.values_mut().for_each(|names| names.sort());
    by_target
}

/// An Autoscaler being reconciled: its identity, its status as it will be written, and where events go.
struct Reconciliation<'a> {
    autoscaler: &'a Autoscaler,
    namespace: String,
    name: String,
    status: AutoscalerStatus,
    now: Timestamp,
    /// What `wasp explain autoscaler` will show of this sync, filled in as it goes.
    record: ScaleRecord,
}

impl Reconciliation<'_> {
    fn object(&self) -> ObjectRef {
        ObjectRef {
            api_version: "wasp.dev/v1alpha1".into(),
            kind: "Autoscaler".into(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.autoscaler.metadata.uid.clone().unwrap_or_default(),
        }
    }

    fn target(&self) -> ObjectRef {
        let target = &self.autoscaler.spec.scale_target_ref;
        ObjectRef {
            api_version: target.api_version.clone().unwrap_or_else(|| "apps/v1".into()),
            kind: target.kind.clone(),
            namespace: self.namespace.clone(),
            name: target.name.clone(),
            uid: String::new(),
        }
    }

    fn condition(&mut self, kind: &str, status: bool, reason: &str, message: &str) {
        set_condition(&mut self.status.conditions, kind, status, reason, message, self.now);
    }
}

impl AutoscalerLoop {
    pub fn new(
        policies: Arc<PolicyRegistry>,
        cluster: Arc<SharedCluster>,
        api: ApiClient,
        events: &EventRecorder,
        metrics: metrics::AutoscalerMetrics,
        records: Arc<DecisionRecords>,
    ) -> Arc<Self> {
        Arc::new(AutoscalerLoop {
            policies,
            cluster,
            api,
            events: events.for_component(COMPONENT),
            metrics,
            samples: Mutex::new(HashMap::new()),
            histories: Mutex::new(HashMap::new()),
            hpa_list_error: Mutex::new(None),
            last_pass: Mutex::new(None),
            heartbeat: Heartbeat::default(),
            stats: Stats::default(),
            records,
        })
    }

    pub fn last_pass(&self) -> Option<PassSummary> {
        self.last_pass.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Passes every `syncPeriod` while the task lives and `stop` is not cancelled (a pass begun finishes its
    /// writes); waits while the configuration has no autoscaler section.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        tokio::select! {
            _ = self.cluster.wait_until_ready() => {}
            _ = stop.cancelled() => return,
        }
        while !stop.is_cancelled() {
            let period = self.policies.current().config.autoscaler.as_ref().map(|section| section.sync_period);
            let started = tokio::time::Instant::now();
            if period.is_some() {
                self.pass().await;
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep_until(started + period.unwrap_or(Duration::from_secs(30))) => {}
            }
        }
    }

    /// Reconciles every Autoscaler once with the current generation. None without an autoscaler section or when
    /// the Autoscalers cannot be listed.
    pub async fn pass(&self) -> Option<PassSummary> {
        let generation = self.policies.current();
        let section = generation.config.autoscaler.clone()?;
        for policy in generation.plans.scaling.keys() {
            self.metrics.policy(policy);
        }
        let _busy = self.heartbeat.busy();
        let started = Instant::now();
        let policy_nanos_before = self.stats.policy_nanos.load(Ordering::Relaxed);
        let listed = {
            let _permit = self.api.permit().await;
            Api::<Autoscaler>::all(self.api.client.clone()).list(&ListParams::default()).await
        };
        let autoscalers = match listed {
            Ok(list) => list.items,
            // A real API server answers 429 "storage is (re)initializing" for a moment after the CRD is created:
            // only a 404 means the CRD is missing.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::warn!("the Autoscaler CRD is not installed (kubectl apply -f manifests/05-crd-autoscaler.yaml)");
                return None;
            }
            Err(error) => {
                tracing::warn!(%error, "could not list Autoscalers; trying again at the next pass");
                return None;
            }
        };
        let owners = TargetOwners { hpas: self.hpa_targets().await, autoscalers: autoscalers_by_target(&autoscalers) };
        let reads: HashMap<String, NamespaceReads> =
            autoscalers.iter().filter_map(|autoscaler| autoscaler.metadata.namespace.clone()).map(|namespace| (namespace, NamespaceReads::default())).collect();
        let (generation, section, owners, reads) = (&generation, &section, &owners, &reads);
        // Owned items: a stream of futures that borrow their item trips the compiler's higher-ranked lifetimes.
        let outcomes: Vec<Outcome> = futures::stream::iter(autoscalers.iter().cloned())
            .map(|autoscaler| async move { self.reconcile(&autoscaler, generation, section, owners, reads).await })
            .buffer_unordered(CONCURRENT_RECONCILES)
            .collect()
            .await;
        let live: HashSet<&str> = autoscalers.iter().filter_map(|autoscaler| autoscaler.metadata.uid.as_deref()).collect();
        self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|(uid, _), _| live.contains(uid.as_str()));
        self.histories.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|uid, _| live.contains(uid.as_str()));
        self.records.scales.retain(|uid| live.contains(uid));
        let took = started.elapsed();
        self.metrics.passed(took, autoscalers.len());
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        let summary = PassSummary {
            finished_at: crate::clock::now().to_string(),
            autoscalers: autoscalers.len(),
            scaled: outcomes.iter().filter(|outcome| **outcome == Outcome::Scaled).count(),
            failed: outcomes.iter().filter(|outcome| **outcome == Outcome::Failed).count(),
            duration_ms: took.as_millis(),
            policy_ms: u128::from((self.stats.policy_nanos.load(Ordering::Relaxed) - policy_nanos_before) / 1_000_000),
        };
        tracing::info!(
            autoscalers = summary.autoscalers,
            scaled = summary.scaled,
            failed = summary.failed,
            took_ms = summary.duration_ms,
            policy_ms = summary.policy_ms,
            "autoscaling pass"
        );
        *self.last_pass.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(summary.clone());
        Some(summary)
    }

    /// (namespace, kind, name) of every workload a HorizontalPodAutoscaler scales, with the HPA's name; why not,
    /// when they cannot be listed.
    async fn hpa_targets(&self) -> Result<HashMap<TargetKey, String>, String> {
        let listed = {
            let _permit = self.api.permit().await;
            Api::<HorizontalPodAutoscaler>::all(self.api.client.clone()).list(&ListParams::default()).await
        };
        match listed {
            Ok(list) => {
                *self.hpa_list_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
                Ok(list
                    .items
                    .into_iter()
                    .filter_map(|hpa| {
                        let target = hpa.spec.scale_target_ref;
                        Some(((hpa.metadata.namespace?, target.kind, target.name), hpa.metadata.name?))
                    })
                    .collect())
            }
            Err(error) => {
                // At warning level once (a missing RBAC rule would otherwise pass unnoticed), then at debug level.
                let error = describe_error(&error);
                let mut last = self.hpa_list_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if last.as_deref() != Some(error.as_str()) {
                    tracing::warn!(%error, "could not list HorizontalPodAutoscalers; conflicts are not checked until it works");
                } else {
                    tracing::debug!(%error, "could not list HorizontalPodAutoscalers");
                }
                *last = Some(error.clone());
                Err(error)
            }
        }
    }

    async fn reconcile(
        &self,
        autoscaler: &Autoscaler,
        generation: &Generation,
        section: &AutoscalerSection,
        owners: &TargetOwners,
        reads: &HashMap<String, NamespaceReads>,
    ) -> Outcome {
        let (namespace, name) = (autoscaler.metadata.namespace.clone().unwrap_or_default(), autoscaler.metadata.name.clone().unwrap_or_default());
        let spec = &autoscaler.spec;
        let record = ScaleRecord {
            autoscaler: format!("{namespace}/{name}"),
            uid: autoscaler.metadata.uid.clone().unwrap_or_default(),
            at: crate::explain::now(),
            target: format!("{}/{}", spec.scale_target_ref.kind, spec.scale_target_ref.name),
            policy: spec.policy.clone().unwrap_or_else(|| DEFAULT_POLICY.into()),
            current: 0,
            min: spec.min_replicas.unwrap_or(1),
            max: spec.max_replicas,
            metrics: Vec::new(),
            recommended: None,
            reason: String::new(),
            limited_by: Vec::new(),
            desired: 0,
            outcome: String::new(),
        };
        let mut run = Reconciliation { autoscaler, namespace, name, status: autoscaler.status.clone().unwrap_or_default(), now: crate::clock::now(), record };
        let namespace_reads = reads.get(&run.namespace);
        let outcome = self.decide(&mut run, generation, section, owners, namespace_reads).await;
        // The HPA's rule: a status is written when it changed.
        if autoscaler.status.as_ref() != Some(&run.status) {
            self.write_status(&run).await;
        }
        if run.record.outcome.is_empty() {
            run.record.outcome = match outcome {
                Outcome::Scaled => format!("scaled from {} to {}", run.record.current, run.record.desired),
                Outcome::Unchanged if section.dry_run && run.record.desired != run.record.current => {
                    format!("dry run: would scale from {} to {}", run.record.current, run.record.desired)
                }
                Outcome::Unchanged => "unchanged".into(),
                Outcome::Failed => "the scale write failed (see the Autoscaler's events)".into(),
            };
        }
        let key = run.record.autoscaler.clone();
        self.records.scales.put(&key, &run.record.uid.clone(), run.record);
        outcome
    }

    async fn decide(
        &self,
        run: &mut Reconciliation<'_>,
        generation: &Generation,
        section: &AutoscalerSection,
        owners: &TargetOwners,
        reads: Option<&NamespaceReads>,
    ) -> Outcome {
        let spec = &run.autoscaler.spec;
        let target = &spec.scale_target_ref;
        let policy_name = spec.policy.clone().unwrap_or_else(|| DEFAULT_POLICY.into());
        run.status.observed_generation = run.autoscaler.metadata.generation;
        run.status.reference = Some(format!("{}/{}", target.kind, target.name));
        run.status.policy = Some(policy_name.clone());
        let (min, max) = (spec.min_replicas.unwrap_or(1), spec.max_replicas);
        let checked = self.check_spec(run.autoscaler, generation, section, &policy_name, min, max);
        let (policy, behavior) = match checked {
            Ok(checked) => checked,
            Err(message) => return self.refuse(run, "ScalingActive", "InvalidSpec", &message).await,
        };
        let key = (run.namespace.clone(), target.kind.clone(), target.name.clone());
        match &owners.hpas {
            Ok(hpas) => {
                if let Some(hpa) = hpas.get(&key) {
                    let message = format!("HorizontalPodAutoscaler {hpa} also scales {}/{}: wasp leaves it to the HPA", target.kind, target.name);
                    return self.refuse(run, "AbleToScale", "ConflictingHorizontalPodAutoscaler", &message).await;
                }
            }
            // Unknown is not "none": both controllers could scale one workload.
            Err(error) => {
                let message =
                    format!("could not list HorizontalPodAutoscalers ({error}); not scaling {}/{} until a conflict can be ruled out", target.kind, target.name);
                return self.refuse(run, "AbleToScale", "FailedListHorizontalPodAutoscalers", &message).await;
            }
        }
        // The HPA's AmbiguousSelector: two Autoscalers on one workload would undo each other every sync.
        if let Some(names) = owners.autoscalers.get(&key).filter(|names| names.len() > 1) {
            let message = format!("Autoscalers {} all scale {}/{}: none of them scales it until one is left", names.join(", "), target.kind, target.name);
            return self.refuse(run, "ScalingActive", "AmbiguousSelector", &message).await;
        }
        let api_version = target.api_version.clone().unwrap_or_else(|| "apps/v1".into());
        let scales = scale_api(&self.api, &run.namespace, &api_version, &target.kind);
        let scale = {
            let _permit = self.api.permit().await;
            scales.get_scale(&target.name).await
        };
        let scale = match scale {
            Ok(scale) => scale,
            Err(error) => {
                let message = format!("the autoscaler was unable to get the target's current scale: {}", describe_error(&error));
                return self.refuse(run, "AbleToScale", "FailedGetScale", &message).await;
            }
        };
        let current = scale.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(0);
        run.status.current_replicas = current;
        run.record.current = current;
        run.condition("AbleToScale", true, "SucceededGetScale", "the autoscaler was able to get the target's current scale");
        if current == 0 && min != 0 {
            run.status.desired_replicas = 0;
            run.condition("ScalingActive", false, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero");
            run.record.outcome = "not scaled: ScalingDisabled: the target has zero replicas".into();
            return Outcome::Unchanged;
        }
        let (desired, reason, normalize) = if current > max {
            (max, "Current number of replicas above Spec.MaxReplicas".to_string(), false)
        } else if current < min {
            (min, "Current number of replicas below Spec.MinReplicas".to_string(), false)
        } else {
            let selector = scale.status.as_ref().and_then(|status| status.selector.clone()).unwrap_or_default();
            if selector.is_empty() {
                // An empty selector selects every pod of the namespace: measured over all of them, one Autoscaler
                // on a custom resource could jump to maxReplicas. The HPA refuses the same ("selector is required").
                let target = &run.autoscaler.spec.scale_target_ref;
                let message = format!(
                    "the scale subresource of {} {} reports no selector (a custom resource's needs `scale.labelSelectorPath`); the target's pods cannot be told from the namespace's",
                    target.kind, target.name
                );
                return self.refuse(run, "ScalingActive", "InvalidSelector", &message).await;
            }
            match self.recommend(run, section, &policy, (&selector, reads), current, min, max).await {
                Some((desired, reason)) => (desired, reason, true),
                None => return Outcome::Failed,
            }
        };
        run.status.last_reason = Some(truncated(&reason, MAX_REASON_BYTES));
        let uid = run.autoscaler.metadata.uid.clone().unwrap_or_default();
        let mut history = self.history_of(&uid, &run.status);
        let mut limit_note = String::new();
        let desired = if normalize {
            let normalized = behavior::normalize(&behavior, &mut history, run.now, current, desired, min, max);
            let (_, able_reason, able_message) = normalized.able_to_scale;
            run.condition("AbleToScale", true, able_reason, able_message);
            let (limited, limit_reason, limit_message) = normalized.limited;
            run.condition("ScalingLimited", limited, limit_reason, limit_message);
            if able_reason != "ReadyForNewScale" {
                self.metrics.limited(able_reason);
                limit_note = format!("; {able_reason} (the policy wanted {desired})");
                run.record.limited_by.push(format!("{able_reason}: {able_message}"));
            }
            if limited {
                self.metrics.limited(limit_reason);
                limit_note.push_str(&format!("; limited by {limit_reason}"));
                run.record.limited_by.push(format!("{limit_reason}: {limit_message}"));
            }
            normalized.replicas
        } else {
            run.condition("ScalingLimited", true, if current > max { "TooManyReplicas" } else { "TooFewReplicas" }, &reason);
            desired
        };
        run.status.desired_replicas = desired;
        run.record.desired = desired;
        if !normalize {
            run.record.limited_by.push(reason.clone());
        }
        let outcome = if desired != current && !section.dry_run {
            let why = format!("policy {policy_name}: {}{limit_note}", truncated(&reason, MAX_REASON_BYTES));
            self.scale(run, &scales, &scale, current, desired, &why, &mut history).await
        } else {
            Outcome::Unchanged
        };
        run.status.recommendations = history.persisted_recommendations(&run.status.recommendations);
        run.status.scale_events = history.scale_events.clone();
        self.histories.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(uid, history);
        outcome
    }

    /// The behavior's history of the Autoscaler `uid`: from memory, or after a restart from its status.
    fn history_of(&self, uid: &str, status: &AutoscalerStatus) -> History {
        let histories = self.histories.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        histories.get(uid).cloned().unwrap_or_else(|| History::restored(&status.recommendations, &status.scale_events))
    }

    /// The policy and behavior the spec asks for, or why the spec cannot be followed.
    fn check_spec(
        &self,
        autoscaler: &Autoscaler,
        generation: &Generation,
        section: &AutoscalerSection,
        policy_name: &str,
        min: i32,
        max: i32,
    ) -> Result<(Arc<LoadedPolicy>, Behavior), String> {
        let spec = &autoscaler.spec;
        if min < 1 {
            return Err(format!("spec.minReplicas: {min} must be at least 1"));
        }
        if max < min {
            return Err(format!("spec.maxReplicas: {max} is less than minReplicas {min}"));
        }
        if let Some(fallback) = &spec.fallback {
            if fallback.failure_threshold == 0 || !(min..=max).contains(&fallback.replicas) {
                return Err(format!(
                    "spec.fallback: failureThreshold must be at least 1 and replicas within [{min}, {max}], not {} and {}",
                    fallback.failure_threshold, fallback.replicas
                ));
            }
        }
        if spec.settings.as_ref().is_some_and(|settings| !settings.is_object()) {
            return Err("spec.settings: must be an object".into());
        }
        let behavior = Behavior::from_spec(spec.behavior.as_ref())?;
        if !section.policies.iter().any(|name| name == policy_name) {
            return Err(format!("spec.policy: {policy_name:?} is not one of the host's scale policies ({})", section.policies.join(", ")));
        }
        let policy = generation.plans.scaling.get(policy_name).cloned().ok_or_else(|| format!("spec.policy: {policy_name:?} is not loaded"))?;
        Ok((policy, behavior))
    }

    /// Records a condition that stops this reconciliation, and a warning event with the same words.
    async fn refuse(&self, run: &mut Reconciliation<'_>, condition: &str, reason: &str, message: &str) -> Outcome {
        run.record.outcome = format!("not scaled: {reason}: {message}");
        let known = run
            .status
            .conditions
            .iter()
            .any(|existing| existing.type_ == condition && existing.status == "False" && existing.reason.as_deref() == Some(reason));
        run.condition(condition, false, reason, message);
        let autoscaler = format!("{}/{}", run.namespace, run.name);
        // Said once at warning level; every sync after that, while nothing changes, only at debug level.
        if known {
            tracing::debug!(%autoscaler, reason, message, "not scaling");
        } else {
            tracing::warn!(%autoscaler, reason, message, "not scaling");
        }
        self.events.event(&run.object(), "Warning", reason, message).await;
        Outcome::Failed
    }

    /// Reads the metrics, asks the policy (or applies the fallback) and returns (desired, reason); None when
    /// nothing can be decided this time (the conditions and events say why).
    #[allow(clippy::too_many_arguments)]
    async fn recommend(
        &self,
        run: &mut Reconciliation<'_>,
        section: &AutoscalerSection,
        policy: &Arc<LoadedPolicy>,
        (selector, reads): (&str, Option<&NamespaceReads>),
        current: i32,
        min: i32,
        max: i32,
    ) -> Option<(i32, String)> {
        let spec = &run.autoscaler.spec;
        // A selector the host can evaluate picks its pods from the namespace's, as the pod informer has them,
        // taken once for the pass; one it cannot is left to the API server.
        let shared = reads.zip(metrics_source::parse_selector(selector));
        let pods = match &shared {
            Some((reads, parsed)) => {
                let all = reads.pods.get_or_init(|| metrics_source::NamespacePods::new(self.cluster.scaled_pods.in_namespace(&run.namespace)));
                Ok(all.selected(parsed).cloned().collect())
            }
            None => self.list_pods(&run.namespace, selector).await.map(|pods| pods.iter().filter_map(ScaledPod::of).map(Arc::new).collect()),
        };
        let pods: Vec<Arc<ScaledPod>> = match pods {
            Ok(pods) => pods,
            Err(error) => {
                let message = format!("the autoscaler was unable to list the target's pods: {error}");
                self.refuse(run, "ScalingActive", "FailedGetPods", &message).await;
                return None;
            }
        };
        let reads_resources = spec.metrics.iter().any(|metric| metric.type_ == "Resource");
        let namespace_usage = match &shared {
            Some((reads, _)) if reads_resources => Some(reads.usage.get_or_init(|| metrics_source::read_pod_usage(&self.api, &run.namespace, None)).await),
            _ => None,
        };
        let readiness = Readiness { cpu_initialization_period: section.cpu_initialization_period, initial_readiness_delay: section.initial_readiness_delay };
        let reader = MetricsReader { api: &self.api, namespace: &run.namespace, selector, pods: &pods, readiness, now: run.now, namespace_usage };
        let mut reading = reader.read(&spec.metrics, current).await;
        run.record.metrics = reading
            .metrics
            .iter()
            .zip(&reading.targets)
            .map(|(metric, target)| MetricLine {
                metric: metric.name.clone(),
                source: source_name(metric.source).to_string(),
                reading: Some(target.strip_prefix(&format!("{}: ", metric.name)).unwrap_or(target).to_string()).filter(|_| metric.error.is_none()),
                error: metric.error.clone(),
                proposal: None,
            })
            .collect();
        run.status.current_metrics = std::mem::take(&mut reading.statuses);
        run.status.targets = Some(reading.targets.join(", "));
        let uid = run.autoscaler.metadata.uid.clone().unwrap_or_default();
        self.remember_readings(&uid, &mut reading.metrics, current, run.now);
        for metric in reading.metrics.iter().filter(|metric| metric.error.is_some()) {
            let [resource, custom, external] = metrics::METRIC_APIS;
            self.metrics.metric_error(match metric.source {
                crate::contract::types::MetricSource::Resource => resource,
                crate::contract::types::MetricSource::External => external,
                _ => custom,
            });
        }
        let failed: Vec<&str> = reading.metrics.iter().filter_map(|metric| metric.error.as_deref()).collect();
        if !reading.metrics.is_empty() && failed.len() == reading.metrics.len() {
            run.status.metric_failures = run.status.metric_failures.saturating_add(1);
            let reason = match reading.metrics[0].source {
                crate::contract::types::MetricSource::Resource => "FailedGetResourceMetric",
                crate::contract::types::MetricSource::Pods => "FailedGetPodsMetric",
                crate::contract::types::MetricSource::Object => "FailedGetObjectMetric",
                crate::contract::types::MetricSource::External => "FailedGetExternalMetric",
            };
            let message = failed.join("; ");
            match &spec.fallback {
                Some(fallback) if run.status.metric_failures >= fallback.failure_threshold => {
                    run.condition("ScalingActive", false, reason, &message);
                    let because = format!("fallback: no metric could be read in {} syncs in a row ({message})", run.status.metric_failures);
                    return Some((fallback.replicas, because));
                }
                _ => {
                    self.refuse(run, "ScalingActive", reason, &message).await;
                    return None;
                }
            }
        }
        run.status.metric_failures = 0;
        let recommendations = self
            .history_of(&uid, &run.status)
            .recommendations
            .iter()
            .map(|recommendation| Recommendation { at: recommendation.time.0.as_second(), replicas: recommendation.replicas.max(0) as u32 })
            .collect();
        let request = ScaleRequest {
            workload: format!("{}/{}/{}", run.namespace, spec.scale_target_ref.kind, spec.scale_target_ref.name),
            now: run.now.as_second(),
            current_replicas: current as u32,
            min_replicas: min as u32,
            max_replicas: max as u32,
            metrics: reading.metrics,
            recommendations,
            // Vertical decisions are not applied yet: no container is sent, so no policy sizes pods.
            containers: Vec::new(),
            state: None,
        };
        let settings = match spec.call_settings(&policy.options.settings) {
            Ok(settings) => settings,
            Err(message) => {
                self.refuse(run, "ScalingActive", "InvalidSpec", &message).await;
                return None;
            }
        };
        let started = Instant::now();
        let answer = crate::runtime::off_async_worker(|| {
            let cluster = self.cluster.read();
            policy.recommend_with_settings(&cluster, &request, settings.as_deref())
        });
        self.stats.policy_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.metrics.recommended(policy.name(), answer.is_ok());
        match answer {
            Ok(ScaleDecision { desired_replicas, reason, proposals, .. }) => {
                run.record.recommended = Some(i32::try_from(desired_replicas).unwrap_or(i32::MAX));
                run.record.reason = reason.clone();
                for proposal in &proposals {
                    if let Some(line) = run.record.metrics.iter_mut().find(|line| line.metric == proposal.metric) {
                        line.proposal = Some(proposal.replicas);
                    }
                }
                match conflicting_metrics(current, desired_replicas, &proposals) {
                    // Holding because metrics pull both ways looks like "the size is right" unless it is said.
                    Some(message) => {
                        let said = run
                            .status
                            .conditions
                            .iter()
                            .any(|condition| condition.type_ == "ScalingActive" && condition.reason.as_deref() == Some("ConflictingMetrics"));
                        run.condition("ScalingActive", true, "ConflictingMetrics", &message);
                        if !said {
                            self.events.event(&run.object(), "Warning", "ConflictingMetrics", &message).await;
                        }
                    }
                    None => {
                        let names: Vec<&str> = request.metrics.iter().map(|metric| metric.name.as_str()).collect();
                        let message = format!("the policy {} computed the replica count from {}", policy.name(), names.join(", "));
                        run.condition("ScalingActive", true, "ValidMetricFound", &message);
                    }
                }
                Some((i32::try_from(desired_replicas).unwrap_or(i32::MAX), reason))
            }
            Err(error) => {
                let message = format!("policy {} failed: {}", policy.name(), truncated(&error.to_string(), MAX_REASON_BYTES));
                self.refuse(run, "ScalingActive", "FailedComputeMetricsReplicas", &message).await;
                None
            }
        }
    }

    /// The pods of `namespace` that `selector` selects, from the API server (a selector the host cannot evaluate).
    async fn list_pods(&self, namespace: &str, selector: &str) -> Result<Vec<Pod>, String> {
        let params = ListParams::default().labels(selector);
        let _permit = self.api.permit().await;
        Api::<Pod>::namespaced(self.api.client.clone(), namespace).list(&params).await.map(|list| list.items).map_err(|error| describe_error(&error))
    }

    /// Adds this reading of each metric to its window and hands the window to the policy.
    fn remember_readings(&self, uid: &str, metrics: &mut [crate::contract::types::Metric], replicas: i32, now: Timestamp) {
        let mut samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for metric in metrics {
            let window = samples.entry((uid.to_string(), metric.name.clone())).or_default();
            if let Some((value, pods)) = metric_source_reading(metric, replicas) {
                window.push_back(MetricSample { at: now.as_second(), value, pods });
                while window.len() > HISTORY_SAMPLES {
                    window.pop_front();
                }
            }
            metric.history = window.iter().cloned().collect();
        }
    }

    /// Changes the replicas through the `scale` subresource, on the resourceVersion read: a change made by
    /// someone else meanwhile makes this one fail rather than overwrite it.
    #[allow(clippy::too_many_arguments)]
    async fn scale(
        &self,
        run: &mut Reconciliation<'_>,
        scales: &Api<DynamicObject>,
        read: &Scale,
        current: i32,
        desired: i32,
        why: &str,
        history: &mut History,
    ) -> Outcome {
        let mut update = read.clone();
        update.spec.get_or_insert_with(Default::default).replicas = Some(desired);
        update.status = None;
        self.stats.scale_requests.fetch_add(1, Ordering::Relaxed);
        let target_name = &run.autoscaler.spec.scale_target_ref.name;
        let answer = {
            let _permit = self.api.permit().await;
            scales.replace_scale(target_name, &PostParams::default(), &update).await
        };
        let up = desired > current;
        let message = format!("New size: {desired} (from {current}); reason: {why}");
        match answer {
            Ok(_) => {
                self.metrics.scaled(up, "ok");
                history.record_scale(desired - current, run.now);
                run.status.last_scale_time = Some(Time(run.now));
                run.condition("AbleToScale", true, "SucceededRescale", &format!("the autoscaler was able to update the target scale to {desired}"));
                tracing::info!(autoscaler = %format!("{}/{}", run.namespace, run.name), from = current, to = desired, why, "rescaled");
                let (object, target) = (run.object(), run.target());
                self.events.event(&object, "Normal", "SuccessfulRescale", &message).await;
                self.events.event(&target, "Normal", "SuccessfulRescale", &message).await;
                Outcome::Scaled
            }
            Err(error) => {
                let conflict = matches!(&error, kube::Error::Api(status) if status.code == 409);
                self.metrics.scaled(up, if conflict { "conflict" } else { "error" });
                let detail = if conflict { "the target's scale changed since it was read; trying again next sync".to_string() } else { describe_error(&error) };
                run.condition("AbleToScale", false, "FailedUpdateScale", &format!("the autoscaler was unable to update the target scale: {detail}"));
                self.events.event(&run.object(), "Warning", "FailedRescale", &format!("{message}; error: {detail}")).await;
                Outcome::Failed
            }
        }
    }

    async fn write_status(&self, run: &Reconciliation<'_>) {
        let autoscalers: Api<Autoscaler> = Api::namespaced(self.api.client.clone(), &run.namespace);
        let patch = serde_json::json!({"status": run.status});
        let written = {
            let _permit = self.api.permit().await;
            autoscalers.patch_status(&run.name, &PatchParams::default(), &Patch::Merge(patch)).await
        };
        if let Err(error) = written {
            tracing::warn!(autoscaler = %format!("{}/{}", run.namespace, run.name), error = %describe_error(&error), "could not write the status");
        }
    }
}

fn metric_source_reading(metric: &crate::contract::types::Metric, replicas: i32) -> Option<(f64, u32)> {
    metric.error.is_none().then(|| metrics_source::current_reading(metric, replicas)).flatten().filter(|(value, _)| value.is_finite())
}

/// The metric's type as the Autoscaler's spec names it.
fn source_name(source: crate::contract::types::MetricSource) -> &'static str {
    use crate::contract::types::MetricSource;
    match source {
        MetricSource::Resource => "Resource",
        MetricSource::Pods => "Pods",
        MetricSource::Object => "Object",
        MetricSource::External => "External",
    }
}

fn describe_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let (earlier, later) = (Timestamp::from_second(1_800_000_000).unwrap(), Timestamp::from_second(1_800_000_100).unwrap());
        let mut conditions = Vec::new();
        set_condition(&mut conditions, "ScalingLimited", false, "DesiredWithinRange", "ok", earlier);
        set_condition(&mut conditions, "AbleToScale", true, "ReadyForNewScale", "ok", earlier);
        set_condition(&mut conditions, "ScalingLimited", false, "DesiredWithinRange", "ok", later);
        assert_eq!(conditions.iter().map(|condition| condition.type_.as_str()).collect::<Vec<_>>(), ["AbleToScale", "ScalingLimited"]);
        assert_eq!(conditions[1].last_transition_time, Some(Time(earlier)));
        set_condition(&mut conditions, "ScalingLimited", true, "ScaleUpLimit", "fast", later);
        assert_eq!(conditions[1].last_transition_time, Some(Time(later)));
        assert_eq!(truncated("ééé", 3), "é...");
    }
}
