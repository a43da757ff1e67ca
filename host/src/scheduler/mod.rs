//! The scheduler: several named profiles in one process, each a chain of WASM filter and score policies.
//!
//! - [`config`]: profiles and per-policy settings, validated as a whole.
//! - [`queue`]: activeQ, backoff and unschedulable pods.
//! - [`cycle`]: one decision with kube-scheduler's semantics.
//! - [`writer`]: bindings, events and conditions written to the API server.
//! - [`leader`]: leader election on a Lease; [`http`]: `/metrics`, `/healthz`, `/readyz`.
//!
//! Profiles come from the [`PolicyRegistry`]: each decision reads its current generation once, so policies
//! and configuration swap between decisions, never during one.
//!
//! Informers (kube-rs watchers) keep a [`ClusterState`] of nodes and bound pods (whichever scheduler placed
//! them) and feed pending pods of our profiles to the queue. A decision assumes the pod on its node at once and
//! binds asynchronously; a failed binding forgets the assumption and retries with backoff.

pub mod config;
pub mod cycle;
pub mod http;
pub mod leader;
pub mod queue;
pub mod writer;

use crate::cluster::{convert, ClusterState};
use crate::registry::{watch, PolicyRegistry};
use crate::runtime::bindings::types::Pod;
use crate::runtime::Runtime;
use config::SchedulerConfig;
use cycle::{Cursor, Decision};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use queue::{ClusterEvent, QueuedPod, SchedulingQueue};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use writer::ApiWriter;

/// Counters and latencies, for `/metrics` and `wasp simulate`'s report.
#[derive(Default)]
pub struct Stats {
    pub scheduled: AtomicU64,
    pub unschedulable: AtomicU64,
    pub bind_errors: AtomicU64,
    /// From first queued to bound, per pod.
    pub latencies: Mutex<Vec<Duration>>,
    /// The last unschedulable message per pod (`namespace/name`).
    pub last_failure: Mutex<BTreeMap<String, String>>,
}

pub struct Scheduler {
    policies: Arc<PolicyRegistry>,
    cluster: Arc<RwLock<ClusterState>>,
    queue: Arc<SchedulingQueue>,
    /// Pending pods that name no profile of ours, by uid: a configuration reload may add their profile.
    foreign_pending: Mutex<HashMap<String, Pod>>,
    writer: Arc<ApiWriter>,
    client: Client,
    pub stats: Arc<Stats>,
    metrics: http::SchedulerMetrics,
    registry: prometheus_client::registry::Registry,
    synced: AtomicBool,
    pods_synced: AtomicBool,
    /// Signalled when an informer finishes its first list.
    informer_synced: tokio::sync::Notify,
}

impl Scheduler {
    /// A scheduler with a fixed configuration (policy files still reload when watched).
    pub fn new(config: &SchedulerConfig, runtime: &Arc<Runtime>, client: Client) -> anyhow::Result<Arc<Scheduler>> {
        Ok(Scheduler::with_registry(Arc::new(PolicyRegistry::new(runtime, config.clone(), None)?), client))
    }

    pub fn with_registry(policies: Arc<PolicyRegistry>, client: Client) -> Arc<Scheduler> {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = http::SchedulerMetrics::register(&mut registry);
        policies.register_metrics(&mut registry);
        Arc::new(Scheduler {
            policies,
            cluster: Arc::new(RwLock::new(ClusterState::new())),
            queue: Arc::new(SchedulingQueue::default()),
            foreign_pending: Mutex::new(HashMap::new()),
            writer: Arc::new(ApiWriter::new(client.clone(), "wasp")),
            client,
            stats: Arc::new(Stats::default()),
            metrics,
            registry,
            synced: AtomicBool::new(false),
            pods_synced: AtomicBool::new(false),
            informer_synced: tokio::sync::Notify::new(),
        })
    }

    pub fn policies(&self) -> &Arc<PolicyRegistry> {
        &self.policies
    }

    /// Where the scheduler reports events about itself, such as a refused policy reload (the host's own Pod,
    /// from the downward API, in a cluster).
    pub fn report_events_on(&self, object: writer::ObjectRef) {
        self.writer.set_host_object(object);
    }

    /// Reloads policies and configuration whenever their files change: a refusal is logged, counted and
    /// recorded as a Warning event; pods waiting for a profile that a new configuration adds are queued.
    pub fn watch_policies(self: &Arc<Self>, options: watch::WatchOptions) -> anyhow::Result<watch::PolicyWatcher> {
        let scheduler = Arc::downgrade(self);
        watch::PolicyWatcher::spawn(self.policies.clone(), options, move |report| {
            let Some(scheduler) = scheduler.upgrade() else { return };
            if report.config_swapped {
                scheduler.admit_foreign_pending();
            }
            if !report.errors.is_empty() {
                let writer = scheduler.writer.clone();
                let message = report.errors.join("; ");
                tokio::spawn(async move { writer.host_event("Warning", "PolicyReloadFailed", &message).await });
            }
        })
    }

    fn admit_foreign_pending(&self) {
        let generation = self.policies.current();
        let mut foreign = self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let ours: Vec<String> = foreign.iter().filter(|(_, pod)| generation.profiles.contains_key(&pod.scheduler_name)).map(|(uid, _)| uid.clone()).collect();
        for uid in ours {
            if let Some(pod) = foreign.remove(&uid) {
                self.queue.upsert(pod);
            }
        }
    }

    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    pub fn profile_names(&self) -> Vec<String> {
        self.policies.current().profiles.keys().cloned().collect()
    }

    /// Whether the node and pod informers have both listed the cluster at least once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed) && self.pods_synced.load(Ordering::Relaxed)
    }

    /// Schedules only while holding the lease: waits to acquire it, schedules, and returns when it is lost (the
    /// caller should exit, as kube-scheduler does, so a restart starts from a clean state).
    pub async fn run_as_leader(self: Arc<Self>, candidate: leader::Candidate) {
        candidate.acquire().await;
        tokio::select! {
            _ = self.clone().run() => {}
            _ = candidate.hold() => {}
        }
    }

    /// Watches nodes and pods and schedules until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        // Dropping the set (when this task ends or is aborted) stops the informers too.
        let mut informers = tokio::task::JoinSet::new();
        informers.spawn(self.clone().watch_nodes());
        informers.spawn(self.clone().watch_pods());
        // Like kube-scheduler's WaitForCacheSync: deciding on a partial view would overcommit nodes.
        loop {
            let synced = self.informer_synced.notified();
            if self.is_synced() {
                break;
            }
            synced.await;
        }
        let mut cursor = Cursor::default();
        loop {
            let queued = self.queue.pop().await;
            // One generation for the whole decision: a reload meanwhile affects the next pod, not this one.
            let generation = self.policies.current();
            let Some(profile) = generation.profiles.get(&queued.pod.scheduler_name).cloned() else {
                // Its profile was removed by a configuration reload.
                self.queue.remove(&queued.pod.uid);
                self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(queued.pod.uid.clone(), queued.pod);
                continue;
            };
            let percentage = generation.config.percentage_of_nodes_to_score;
            let decision = tokio::task::block_in_place(|| {
                let cluster = self.cluster.read().unwrap_or_else(|poisoned| poisoned.into_inner());
                cycle::schedule(&profile, &cluster, &queued.pod, &mut cursor, percentage)
            });
            match decision {
                Decision::Bind { node, feasible, evaluated } => {
                    tracing::debug!(pod = %format!("{}/{}", queued.pod.namespace, queued.pod.name), %node, feasible, evaluated, "decided");
                    self.assume_and_bind(queued, node, profile.scheduler_name.clone())
                }
                Decision::Unschedulable { message, waits_for_other_pods } => {
                    self.metrics.attempt(&profile.scheduler_name, "unschedulable");
                    let key = format!("{}/{}", queued.pod.namespace, queued.pod.name);
                    tracing::info!(pod = %key, profile = %profile.scheduler_name, %message, "unschedulable");
                    self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
                    self.stats.last_failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(key, message.clone());
                    let (writer, pod) = (self.writer.clone(), queued.pod.clone());
                    self.queue.unschedulable(QueuedPod { waits_for_other_pods, ..queued });
                    tokio::spawn(async move { writer.unschedulable(&pod, &message, &profile.scheduler_name).await });
                }
            }
        }
    }

    fn assume_and_bind(self: &Arc<Self>, queued: QueuedPod, node: String, profile: String) {
        self.cluster.write().unwrap_or_else(|poisoned| poisoned.into_inner()).upsert_pod(queued.pod.clone(), &node);
        self.queue.cluster_changed(ClusterEvent::PodAdded);
        let scheduler = self.clone();
        tokio::spawn(async move {
            let pod = &queued.pod;
            let key = format!("{}/{}", pod.namespace, pod.name);
            match scheduler.writer.bind(pod, &node).await {
                Ok(()) => {
                    tracing::debug!(pod = %key, %node, %profile, "bound");
                    scheduler.stats.scheduled.fetch_add(1, Ordering::Relaxed);
                    scheduler.metrics.attempt(&profile, "scheduled");
                    scheduler.metrics.bound(&profile, queued.first_queued.elapsed());
                    scheduler.stats.latencies.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(queued.first_queued.elapsed());
                    scheduler.stats.last_failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&key);
                    scheduler.queue.remove(&pod.uid);
                    scheduler.writer.scheduled(pod, &node, &profile).await;
                }
                Err(error) => {
                    tracing::warn!(pod = %key, %node, %error, "binding failed; forgetting the assumed pod");
                    scheduler.stats.bind_errors.fetch_add(1, Ordering::Relaxed);
                    scheduler.metrics.attempt(&profile, "error");
                    scheduler.cluster.write().unwrap_or_else(|poisoned| poisoned.into_inner()).remove_pod(&pod.uid);
                    match error {
                        // Bound by someone else, or gone: the informer brings the truth.
                        kube::Error::Api(status) if status.code == 409 || status.code == 404 => scheduler.queue.remove(&pod.uid),
                        _ => scheduler.queue.backoff(queued),
                    }
                }
            }
        });
    }

    async fn watch_nodes(self: Arc<Self>) {
        let api: Api<KubeNode> = Api::all(self.client.clone());
        let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        let mut relisted = HashSet::new();
        loop {
            let event = match stream.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "node watch failed; retrying");
                    continue;
                }
            };
            let mut cluster = self.cluster.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            // Only a node added or changed in what policies see can help a waiting pod.
            let mut changed = false;
            match event {
                Event::Init => relisted.clear(),
                Event::InitApply(node) | Event::Apply(node) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    relisted.insert(name);
                    match convert::node(&node) {
                        Ok(node) => changed = cluster.upsert_node(node),
                        Err(error) => tracing::warn!(%error, "ignoring node"),
                    }
                }
                Event::Delete(node) => cluster.remove_node(node.metadata.name.as_deref().unwrap_or("")),
                Event::InitDone => {
                    self.synced.store(true, Ordering::Relaxed);
                    self.informer_synced.notify_waiters();
                    let gone: Vec<String> = cluster.node_ids().into_iter().filter_map(|id| cluster.node_name(id).map(str::to_string)).filter(|name| !relisted.contains(name)).collect();
                    for name in gone {
                        cluster.remove_node(&name);
                    }
                }
            }
            drop(cluster);
            if changed {
                self.queue.cluster_changed(ClusterEvent::NodeChanged);
            }
        }
    }

    async fn watch_pods(self: Arc<Self>) {
        let api: Api<KubePod> = Api::all(self.client.clone());
        let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        loop {
            match stream.try_next().await {
                Ok(Some(Event::InitApply(pod) | Event::Apply(pod))) => self.observe_pod(&pod),
                Ok(Some(Event::Delete(pod))) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    self.cluster.write().unwrap_or_else(|poisoned| poisoned.into_inner()).remove_pod(&uid);
                    self.queue.remove(&uid);
                    self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&uid);
                    self.queue.cluster_changed(ClusterEvent::PodRemoved);
                }
                Ok(Some(Event::InitDone)) => {
                    self.pods_synced.store(true, Ordering::Relaxed);
                    self.informer_synced.notify_waiters();
                }
                Ok(Some(Event::Init)) => {}
                Ok(None) => return,
                Err(error) => tracing::warn!(%error, "pod watch failed; retrying"),
            }
        }
    }

    fn observe_pod(&self, source: &KubePod) {
        let pod: Pod = match convert::pod(source) {
            Ok(pod) => pod,
            Err(error) => {
                tracing::warn!(%error, "ignoring pod");
                return;
            }
        };
        let node = source.spec.as_ref().and_then(|spec| spec.node_name.clone()).filter(|node| !node.is_empty());
        let finished = matches!(pod.phase, crate::runtime::bindings::types::PodPhase::Succeeded | crate::runtime::bindings::types::PodPhase::Failed);
        match node {
            Some(node) => {
                let mut cluster = self.cluster.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                let event = if finished {
                    cluster.remove_pod(&pod.uid);
                    Some(ClusterEvent::PodRemoved)
                } else {
                    cluster.upsert_pod(pod.clone(), &node).then_some(ClusterEvent::PodAdded)
                };
                drop(cluster);
                self.queue.remove(&pod.uid);
                self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&pod.uid);
                if let Some(event) = event {
                    self.queue.cluster_changed(event);
                }
            }
            None if !pod.terminating && !finished => {
                let mut foreign = self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if self.policies.current().profiles.contains_key(&pod.scheduler_name) {
                    foreign.remove(&pod.uid);
                    self.queue.upsert(pod);
                } else {
                    self.queue.remove(&pod.uid);
                    foreign.insert(pod.uid.clone(), pod);
                }
            }
            None => {
                self.queue.remove(&pod.uid);
                self.foreign_pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&pod.uid);
            }
        }
    }
}
