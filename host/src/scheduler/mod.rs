//! The scheduler loop: several named profiles in one process, each a chain of WASM filter and score policies.
//!
//! - [`queue`]: activeQ, backoff and unschedulable pods.
//! - [`cycle`]: one decision with kube-scheduler's semantics, and the fit check other loops reuse.
//! - [`gang`]: the pods of a gang (a PodGroup with `minCount`) placed together or not at all.
//! - [`binder`]: bindings, events and conditions written to the API server.
//! - [`metrics`]: the scheduler's metric families.
//!
//! Profiles come from the [`PolicyRegistry`]: each decision reads its current generation once, so policies
//! and configuration swap between decisions, never during one.
//!
//! The scheduler reads the host's [`SharedCluster`] and follows its events: pending pods of its profiles enter
//! the queue; pods bound or removed elsewhere retry the unschedulable pods they may help. A decision assumes the
//! pod on its node at once and binds asynchronously; a failed binding forgets the assumption and retries with
//! backoff.

pub mod binder;
pub mod cycle;
mod gang;
pub mod metrics;
pub mod queue;

use crate::cluster::{volumes, ClusterEvent, SharedCluster};
use crate::contract::types::Pod;
use crate::explain::{DecisionRecords, FilterStep, PlacementRecord, ScorePolicy};
use crate::registry::PolicyRegistry;
use crate::registry::ProfilePolicies;
use crate::serve::Heartbeat;
use binder::Binder;
use cycle::{Cursor, Decision, Trace};
use queue::{Change, HelpedBy, QueuedPod, SchedulingQueue};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a pod waits for its `WaitForFirstConsumer` claims to be provisioned once placed: kube-scheduler's
/// VolumeBinding `bindTimeoutSeconds` default.
const BIND_VOLUMES_TIMEOUT: Duration = Duration::from_secs(600);

/// Counters, and what `wasp simulate` reports when asked to keep it.
#[derive(Default)]
pub struct Stats {
    pub scheduled: AtomicU64,
    pub unschedulable: AtomicU64,
    pub bind_errors: AtomicU64,
    /// Binding requests sent, successful or not: a pod bound twice shows here, whatever the API server does.
    pub bind_requests: AtomicU64,
    /// Kept only when [`Scheduler::keep_report`] asked for it: a long-running host must not grow with every pod.
    report: Mutex<Option<Report>>,
}

/// What `wasp simulate` prints at the end of a run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// From first queued to bound, per pod (on tokio's clock: simulated time under `wasp simulate`).
    pub latencies: Vec<Duration>,
    /// How long each decision took to compute, in real time.
    pub decisions: Vec<Duration>,
    /// The last unschedulable message per pod (`namespace/name`), while the pod still waits.
    pub last_failure: BTreeMap<String, String>,
}

impl Stats {
    fn with_report(&self, update: impl FnOnce(&mut Report)) {
        if let Some(report) = self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_mut() {
            update(report);
        }
    }

    pub fn report(&self) -> Option<Report> {
        self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

pub struct Scheduler {
    policies: Arc<PolicyRegistry>,
    cluster: Arc<SharedCluster>,
    queue: Arc<SchedulingQueue>,
    binder: Arc<Binder>,
    pub stats: Arc<Stats>,
    metrics: metrics::SchedulerMetrics,
    /// Whether the loop runs (this host leads): a standby keeps no queue, it reads the pending pods when it starts.
    running: AtomicBool,
    /// The writes decisions sent on their own tasks (bindings, conditions): a stopping scheduler waits for them.
    writes: TaskTracker,
    /// Beats at every pod taken from the queue and every decision made (`/healthz`).
    pub heartbeat: Heartbeat,
    /// The current run's stop: a binding that waits for its claims to be provisioned gives up when it comes.
    stop: Mutex<CancellationToken>,
    /// The last decision per pod, for `wasp explain pod`.
    records: Arc<DecisionRecords>,
}

fn key_of(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

impl Scheduler {
    pub fn new(
        policies: Arc<PolicyRegistry>,
        cluster: Arc<SharedCluster>,
        binder: Binder,
        metrics: metrics::SchedulerMetrics,
        records: Arc<DecisionRecords>,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            policies,
            cluster,
            queue: Arc::new(SchedulingQueue::default()),
            binder: Arc::new(binder),
            stats: Arc::new(Stats::default()),
            metrics,
            running: AtomicBool::new(false),
            writes: TaskTracker::new(),
            heartbeat: Heartbeat::default(),
            stop: Mutex::new(CancellationToken::new()),
            records,
        })
    }

    /// Keeps per-pod latencies and failure messages for a final report (`wasp simulate`).
    pub fn keep_report(&self) {
        *self.stats.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Report::default());
    }

    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    pub fn profile_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.policies.current().plans.scheduling.keys().cloned().collect();
        names.sort();
        names
    }

    /// Pods waiting in each of the queue's parts.
    pub fn queue_sizes(&self) -> queue::QueueSizes {
        self.queue.sizes()
    }

    /// Brings scrape-time gauges up to date.
    pub fn update_metrics(&self) {
        self.metrics.queue_sizes(self.queue_sizes());
        self.metrics.state(self.is_running(), self.queue.longest_wait(), self.cluster.waiting_budget.deferred(), &self.profile_names());
    }

    /// Queues the pending pods of our profiles, and drops queued pods that no longer wait (bound or deleted while
    /// events were missed): at start, after falling behind the events, and when a new configuration may have
    /// added profiles. Nothing while the loop does not run.
    pub fn admit_pending(&self) {
        if !self.running.load(Ordering::Relaxed) {
            return;
        }
        let generation = self.policies.current();
        self.queue.retain(|uid| self.cluster.is_pending(uid));
        for pod in self.cluster.pending_pods() {
            if generation.plans.scheduling.contains_key(&pod.scheduler_name) && self.cluster.is_pending(&pod.uid) {
                self.queue.upsert(pod);
            }
        }
    }

    /// New policy versions serve: pods that failed (a policy trapped, say) get another attempt now rather than
    /// after the 5-minute flush.
    pub fn policies_changed(&self) {
        self.queue.cluster_changed(Change::NodeChanged);
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Schedules until the task is dropped or `stop` is cancelled: waits for the informers' first list, then
    /// follows the cluster. Stopped, it takes no new pod and returns once the bindings and conditions already
    /// sent are answered (a graceful shutdown: the next leader then sees every binding this one made).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let events = self.cluster.subscribe();
        tokio::select! {
            _ = self.cluster.wait_until_ready() => {}
            _ = stop.cancelled() => return,
        }
        *self.stop.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = stop.clone();
        self.running.store(true, Ordering::Relaxed);
        self.admit_pending();
        let follower = tokio::spawn(self.clone().follow(events));
        // Stop following and admitting when scheduling stops (the task is aborted when the lease is lost).
        struct Stopped<'a>(tokio::task::JoinHandle<()>, &'a AtomicBool);
        impl Drop for Stopped<'_> {
            fn drop(&mut self) {
                self.0.abort();
                self.1.store(false, Ordering::Relaxed);
            }
        }
        let stopped = Stopped(follower, &self.running);
        let mut cursor = Cursor::default();
        loop {
            let queued = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                queued = self.queue.pop() => queued,
            };
            self.heartbeat.beat();
            let (profile, started) = (queued.pod.scheduler_name.clone(), std::time::Instant::now());
            self.schedule_one(queued, &mut cursor);
            self.queue.charge(&profile, started.elapsed());
            self.heartbeat.beat();
            // The queue is never empty during a burst: without a turn given now and then, this task would not
            // see that it was aborted (the Lease lost) until the burst ends.
            tokio::task::coop::consume_budget().await;
        }
        // No more events followed (they would add writes), and a binding still waiting for its claims gives up.
        drop(stopped);
        tracing::info!(in_flight = self.writes.len(), "scheduler stopping; waiting for the writes in flight");
        self.writes.close();
        self.writes.wait().await;
        self.writes.reopen();
    }

    fn schedule_one(self: &Arc<Self>, queued: QueuedPod, cursor: &mut Cursor) {
        if !self.cluster.is_pending(&queued.pod.uid) {
            // Bound (by us, already assumed, or by anyone) or deleted since it was queued.
            self.queue.remove(&queued.pod.uid);
            return;
        }
        // One generation for the whole decision: a reload meanwhile affects the next pod, not this one.
        let generation = self.policies.current();
        let Some(profile) = generation.plans.scheduling.get(&queued.pod.scheduler_name).cloned() else {
            // Its profile was removed by a configuration reload; a later one may bring it back (admit_pending).
            self.queue.remove(&queued.pod.uid);
            return;
        };
        let percentage = generation.config.scheduler.percentage_of_nodes_to_score;
        let queued = match self.cluster.groups.group_of(&queued.pod.uid) {
            Some(group) => match self.schedule_member(queued, &group, &profile, percentage, cursor) {
                Some(alone) => alone,
                None => return,
            },
            None => queued,
        };
        let mut attempt = self.attempt(&profile, &queued.pod, percentage, cursor);
        match attempt.record(&self.stats, &self.records, &queued.pod, &profile) {
            Decision::Bind { node, feasible, evaluated } => {
                tracing::debug!(pod = %key_of(&queued.pod), %node, feasible, evaluated, "decided");
                let reserved = self.reserve_volumes(&queued.pod, &node, &attempt.to_provision);
                self.cluster.assume(queued.pod.clone(), &node);
                self.bind(queued, node, profile.scheduler_name.clone(), reserved)
            }
            Decision::Unschedulable { message, helped_by } => self.not_placed(queued, &profile.scheduler_name, message, helped_by, true),
        }
    }

    /// Filters and scores `pod` with `profile`, assuming nothing: what the pod's claims and the policies say.
    fn attempt(&self, profile: &ProfilePolicies, pod: &Pod, percentage: u32, cursor: &mut Cursor) -> Attempt {
        let hint = self.cluster.hints.for_pod(pod);
        let nominations = self.cluster.nominations();
        // The pod's claims as its volumes and their classes stand now (pods without claims are not copied); a
        // claim no node can satisfy is kube-scheduler's PreFilter rejection, said once for the pod. So is a pod
        // with resource claims: its devices would have to be allocated before it is bound, which the host does not
        // do (yet), and a pod bound without them never starts.
        let started = std::time::Instant::now();
        let resource_claims = self.cluster.resource_claims(&pod.uid);
        let prefiltered = match resource_claims.is_empty() {
            true => self.cluster.volumes.resolved(pod),
            false => Err(devices_not_allocated(&resource_claims)),
        };
        let (resolved, (decision, trace)) = match prefiltered {
            Ok(resolved) => {
                let pod = resolved.as_ref().unwrap_or(pod);
                let decided = crate::runtime::off_async_worker(|| {
                    let cluster = self.cluster.read();
                    cycle::schedule(profile, &cluster, pod, hint.as_ref(), cursor, percentage, &nominations)
                });
                (resolved, decided)
            }
            Err(reason) => {
                let nodes = self.cluster.read().node_names().count();
                let message = format!("0/{nodes} nodes are available: {reason}.");
                (None, (Decision::Unschedulable { message, helped_by: HelpedBy::default() }, Trace { nodes, ..Trace::default() }))
            }
        };
        let to_provision = resolved.as_ref().map(|pod| volumes::to_provision(pod).map(str::to_string).collect()).unwrap_or_default();
        Attempt { decision, trace, took: started.elapsed(), to_provision }
    }

    /// The pod did not fit (or may not be placed yet): its owner is told `message` (a `FailedScheduling` event and
    /// `PodScheduled=False`), and it waits for a change `helped_by` says may help. With `may_preempt`, the
    /// rescheduler's preemption is asked to look for room (for a gang's members, the room of the whole gang).
    fn not_placed(self: &Arc<Self>, queued: QueuedPod, profile: &str, message: String, helped_by: HelpedBy, may_preempt: bool) {
        self.metrics.attempt(profile, "unschedulable");
        let key = key_of(&queued.pod);
        tracing::info!(pod = %key, %profile, %message, "unschedulable");
        self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
        if may_preempt {
            self.cluster.note_unschedulable(&queued.pod.uid, &message);
        }
        self.stats.with_report(|report| {
            report.last_failure.insert(key, message.clone());
        });
        let (binder, pod, profile) = (self.binder.clone(), queued.pod.clone(), profile.to_string());
        self.queue.unschedulable(QueuedPod { helped_by, ..queued });
        self.writes.spawn(async move { binder.unschedulable(&pod, &message, &profile).await });
    }

    fn node_record(&self, node: &str) -> Result<crate::contract::types::Node, String> {
        let cluster = self.cluster.read();
        cluster.node_id(node).and_then(|id| cluster.node(id)).map(|(record, _)| record.clone()).ok_or_else(|| format!("node {node:?} not found"))
    }

    /// kube-scheduler's VolumeBinding Reserve, in the cycle: the pod's waiting claims given volumes on `node` (or
    /// left to be provisioned there) before the next pod is decided, so two pods are never given one volume.
    fn reserve_volumes(&self, pod: &Pod, node: &str, to_provision: &[String]) -> Result<Vec<volumes::ReservedClaim>, String> {
        if to_provision.is_empty() {
            return Ok(Vec::new());
        }
        let node_record = self.node_record(node)?;
        self.cluster.volumes.reserve(&pod.namespace, to_provision, &node_record)
    }

    /// Binds the pod assumed on `node`, after its `WaitForFirstConsumer` claims (`reserved`) are bound there.
    fn bind(self: &Arc<Self>, queued: QueuedPod, node: String, profile: String, reserved: Result<Vec<volumes::ReservedClaim>, String>) {
        let scheduler = self.clone();
        self.writes.spawn(async move {
            let pod = &queued.pod;
            let key = key_of(pod);
            let volumes_bound = match &reserved {
                Ok(claims) => scheduler.bind_volumes(pod, &node, claims).await,
                Err(error) => Err(error.clone()),
            };
            if let Err(error) = volumes_bound {
                if let Ok(claims) = &reserved {
                    scheduler.cluster.volumes.unreserve(claims);
                }
                if !scheduler.is_running() {
                    // Stopping or no longer leading: the next leader places the pod; nothing to tell it.
                    tracing::info!(pod = %key, %node, "stopped while the claims were provisioned; the next leader places the pod");
                    scheduler.cluster.forget(&pod.uid);
                    return;
                }
                tracing::warn!(pod = %key, %node, %error, "binding volumes failed; forgetting the assumed pod");
                scheduler.metrics.attempt(&profile, "error");
                scheduler.cluster.forget(&pod.uid);
                let message = format!("running PreBind plugin \"VolumeBinding\": binding volumes: {error}");
                scheduler.binder.not_scheduled(&crate::kube::ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid), "SchedulerError", &message, &profile).await;
                scheduler.queue.backoff(queued);
                return;
            }
            scheduler.stats.bind_requests.fetch_add(1, Ordering::Relaxed);
            match scheduler.binder.bind(pod, &node).await {
                Ok(()) => {
                    tracing::debug!(pod = %key, %node, %profile, "bound");
                    scheduler.stats.scheduled.fetch_add(1, Ordering::Relaxed);
                    scheduler.metrics.attempt(&profile, "scheduled");
                    scheduler.metrics.bound(&profile, queued.first_queued.elapsed());
                    scheduler.stats.with_report(|report| {
                        report.latencies.push(queued.first_queued.elapsed());
                        report.last_failure.remove(&key);
                    });
                    scheduler.queue.remove(&pod.uid);
                    scheduler.cluster.hints.consumed_by(pod);
                    scheduler.binder.scheduled(pod, &node, &profile).await;
                }
                Err(error) => {
                    tracing::warn!(pod = %key, %node, %error, "binding failed; forgetting the assumed pod");
                    scheduler.stats.bind_errors.fetch_add(1, Ordering::Relaxed);
                    scheduler.metrics.attempt(&profile, "error");
                    match error {
                        // Already bound (by someone else, or a binding of ours that answered late): the informer
                        // brings the truth, and may have already; forgetting here could erase real usage.
                        kube::Error::Api(status) if status.code == 409 => scheduler.queue.remove(&pod.uid),
                        kube::Error::Api(status) if status.code == 404 => {
                            scheduler.cluster.forget(&pod.uid);
                            scheduler.queue.remove(&pod.uid);
                        }
                        // Refused (a 403 for a missing RBAC rule, say) or failed: the pod's owner sees why, as
                        // kube-scheduler reports a failed binding cycle, and the pod is tried again after a backoff.
                        other => {
                            scheduler.cluster.forget(&pod.uid);
                            let detail = match &other {
                                kube::Error::Api(status) => status.message.clone(),
                                other => other.to_string(),
                            };
                            let message = format!("binding rejected: {detail}");
                            scheduler
                                .binder
                                .not_scheduled(&crate::kube::ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid), "SchedulerError", &message, &profile)
                                .await;
                            scheduler.queue.backoff(queued);
                        }
                    }
                }
            }
        });
    }

    /// kube-scheduler's VolumeBinding PreBind: writes each reserved claim into its volume's `claimRef`, or names
    /// the node in a claim to be provisioned, then waits until each claim is bound (the claim's informer says so).
    async fn bind_volumes(&self, pod: &Pod, node: &str, reserved: &[volumes::ReservedClaim]) -> Result<(), String> {
        if reserved.is_empty() {
            return Ok(());
        }
        let node_record = self.node_record(node)?;
        for reservation in reserved {
            let claim = &reservation.claim;
            match &reservation.volume {
                Some((volume, version)) => self
                    .binder
                    .claim_volume(volume, version, &pod.namespace, claim)
                    .await
                    .map_err(|error| format!("persistentvolume {volume:?} for claim {claim:?}: {error}"))?,
                None => {
                    self.binder.select_node_for_claim(&pod.namespace, claim, node).await.map_err(|error| format!("persistentvolumeclaim {claim:?}: {error}"))?
                }
            }
        }
        let stop = self.stop.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        for reservation in reserved {
            tokio::select! {
                bound = self.cluster.volumes.wait_bound(&pod.namespace, &reservation.claim, &node_record, BIND_VOLUMES_TIMEOUT) => bound?,
                _ = stop.cancelled() => return Err("this scheduler stopped while the claims were provisioned".into()),
            }
        }
        // A long wait may outlast this host's lease: a standby that took over places the pod itself.
        if !self.is_running() {
            return Err("this scheduler stopped (its lease was lost) while the claims were provisioned".into());
        }
        Ok(())
    }

    /// Feeds the queue from the cluster's events.
    async fn follow(self: Arc<Self>, mut events: tokio::sync::broadcast::Receiver<ClusterEvent>) {
        loop {
            match events.recv().await {
                Ok(event) => self.on_cluster_event(event),
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "fell behind the cluster's events; requeueing from the pending pods");
                    self.admit_pending();
                    self.queue.cluster_changed(Change::NodeChanged);
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    fn on_cluster_event(&self, event: ClusterEvent) {
        match event {
            ClusterEvent::PodPending(pod) => {
                if self.policies.current().plans.scheduling.contains_key(&pod.scheduler_name) {
                    self.queue.upsert(Arc::unwrap_or_clone(pod));
                } else {
                    self.queue.remove(&pod.uid);
                }
            }
            ClusterEvent::PendingGone { uid } => self.queue.remove(&uid),
            // A new member of a gang (of any scheduler): its held members here may make up minCount now.
            ClusterEvent::GroupMemberAdded { uid } => {
                if let Some(group) = self.cluster.groups.group_of(&uid) {
                    let others: Vec<String> = self.cluster.groups.members(&group).into_iter().filter(|member| *member != uid).collect();
                    self.queue.retry(&others);
                }
            }
            ClusterEvent::PodGated(pod) => {
                self.queue.remove(&pod.uid);
                if self.policies.current().plans.scheduling.contains_key(&pod.scheduler_name) {
                    let binder = self.binder.clone();
                    self.writes.spawn(async move { binder.gated(&pod).await });
                }
            }
            ClusterEvent::PodUnreadable(pod) => {
                self.queue.remove(&pod.uid);
                if self.policies.current().plans.scheduling.contains_key(&pod.scheduler_name) {
                    let (binder, object) = (self.binder.clone(), crate::kube::ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid));
                    let message = format!("the pod cannot be scheduled: {}", pod.error);
                    self.writes.spawn(async move { binder.not_scheduled(&object, "SchedulerError", &message, &pod.scheduler_name).await });
                }
            }
            other => {
                if let Some(change) = requeue_hint(&other) {
                    self.queue.cluster_changed(change);
                }
            }
        }
    }
}

/// One pod filtered and scored, before anything is assumed or written.
struct Attempt {
    decision: Decision,
    trace: Trace,
    took: Duration,
    /// Its `WaitForFirstConsumer` claims still to be given a volume or provisioned, wherever it goes.
    to_provision: Vec<String>,
}

impl Attempt {
    /// Keeps the decision for `wasp explain pod` and the report, and returns it.
    fn record(&mut self, stats: &Stats, records: &DecisionRecords, pod: &Pod, profile: &ProfilePolicies) -> Decision {
        self.record_as(stats, records, pod, profile, self.decision.clone())
    }

    /// Keeps `decision` as the one made for the pod: a gang member that fit in a gang that did not is recorded
    /// unschedulable, with the group's message.
    fn record_as(&mut self, stats: &Stats, records: &DecisionRecords, pod: &Pod, profile: &ProfilePolicies, decision: Decision) -> Decision {
        stats.with_report(|report| report.decisions.push(self.took));
        let record = placement_record(pod, profile, &decision, std::mem::take(&mut self.trace), self.took);
        records.placements.put(&key_of(pod), &pod.uid, record);
        decision
    }
}

/// An unschedulable message is kept in a decision record up to this size.
const MAX_RECORDED_MESSAGE_BYTES: usize = 1024;

/// The record of one decision: every filter of the profile in order (those not reached with nothing
/// evaluated), the score policies, and the best nodes' scores.
pub fn placement_record(pod: &Pod, profile: &ProfilePolicies, decision: &Decision, mut trace: Trace, took: Duration) -> PlacementRecord {
    let filters = profile
        .filters
        .iter()
        .map(|policy| match trace.filters.iter().position(|tally| tally.policy == policy.name()) {
            Some(index) => {
                let tally = trace.filters.swap_remove(index);
                FilterStep::new(&tally.policy, tally.evaluated, tally.rejected, tally.reasons)
            }
            None => FilterStep::new(policy.name(), 0, 0, []),
        })
        .collect();
    let (node, message) = match decision {
        Decision::Bind { node, .. } => (Some(node.clone()), None),
        // The whole message is on the pod's condition; over thousands of nodes it may name thousands of reasons.
        Decision::Unschedulable { message, .. } => (None, Some(crate::text::truncated(message, MAX_RECORDED_MESSAGE_BYTES))),
    };
    PlacementRecord {
        pod: key_of(pod),
        uid: pod.uid.clone(),
        profile: profile.scheduler_name.clone(),
        at: crate::explain::now(),
        duration_micros: took.as_micros() as u64,
        nodes: trace.nodes,
        evaluated: trace.evaluated,
        feasible: trace.feasible,
        node,
        chosen_by: trace.chosen_by,
        message,
        filters,
        score_policies: profile.scores.iter().map(|(policy, weight)| ScorePolicy { policy: policy.name().to_string(), weight: *weight }).collect(),
        top_nodes: trace.top_nodes,
    }
}

/// Which unschedulable pods a change of the cluster may help, if any (kube-scheduler's queueing hints, coarsely).
/// Why a pod with resource claims waits: kube-scheduler's DynamicResources plugin allocates devices to its claims
/// before binding, and the host does not, so it binds no such pod rather than place it where its devices are not.
pub(crate) fn devices_not_allocated(claims: &[String]) -> String {
    format!(
        "pod has resource claims ({}), and wasp does not allocate devices (dynamic resource allocation) yet: schedule it with a scheduler that does, such as kube-scheduler",
        claims.join(", ")
    )
}

fn requeue_hint(event: &ClusterEvent) -> Option<Change> {
    match event {
        ClusterEvent::NodeChanged { .. } => Some(Change::NodeChanged),
        ClusterEvent::PodRemoved { .. } => Some(Change::PodRemoved),
        ClusterEvent::PodBound { .. } => Some(Change::PodAdded),
        // Smaller requests free room; new labels may matter to spread and affinity; readiness flips and restart
        // counts help no waiting pod.
        ClusterEvent::PodUpdated { requests_changed: true, .. } => Some(Change::PodRemoved),
        ClusterEvent::PodUpdated { labels_changed: true, .. } => Some(Change::PodAdded),
        ClusterEvent::PodUpdated { .. } => None,
        // Fewer nodes never make room.
        ClusterEvent::NodeRemoved { .. } => None,
        // A claim, its volume or its class appeared or changed: a pod that waited for it may fit anywhere now.
        ClusterEvent::VolumesChanged => Some(Change::NodeChanged),
        // A PodGroup appeared or changed its policy: its held members may be tried.
        ClusterEvent::GroupsChanged => Some(Change::NodeChanged),
        ClusterEvent::PodPending(_)
        | ClusterEvent::GroupMemberAdded { .. }
        | ClusterEvent::PendingGone { .. }
        | ClusterEvent::PodGated(_)
        | ClusterEvent::PodUnreadable(_)
        | ClusterEvent::PreemptionWanted { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterState;
    use crate::contract::types::{FilterResult, NodeId, ViewScope};
    use crate::explain::store::Weighed;
    use crate::policy::SchedulingPolicy;

    /// Rejects every node with a reason of its own: the worst case for a record's size.
    struct EachNodeItsReason;

    impl SchedulingPolicy for EachNodeItsReason {
        fn name(&self) -> &str {
            "each-node-its-reason"
        }
        fn view(&self) -> ViewScope {
            ViewScope::Nodes
        }
        fn filter_or_failure_mode(&self, cluster: &ClusterState, _: &Pod, candidates: &[NodeId]) -> FilterResult {
            let rejections = candidates.iter().map(|id| vec![format!("node {} is not the one", cluster.node_name(*id).unwrap())]).collect();
            FilterResult { verdicts: (1..=candidates.len() as u32).collect(), rejections }
        }
        fn score_or_failure_mode(&self, _: &ClusterState, _: &Pod, candidates: &[NodeId]) -> Vec<u32> {
            vec![0; candidates.len()]
        }
    }

    #[test]
    fn a_placement_record_stays_small_however_many_nodes_and_reasons() {
        let mut cluster = ClusterState::new();
        for number in 0..5000 {
            let node = serde_json::json!({"metadata": {"name": format!("n{number}")}, "status": {"allocatable": {"cpu": "4"}}});
            cluster.upsert_node(crate::cluster::convert::node(&serde_json::from_value(node).unwrap()).unwrap());
        }
        let source = serde_json::json!({"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": {"containers": [{"name": "a"}]}});
        let pod = crate::cluster::convert::pod(&serde_json::from_value(source).unwrap()).unwrap();
        let profile = ProfilePolicies { scheduler_name: "test".into(), filters: vec![Arc::new(EachNodeItsReason)], scores: vec![] };
        let (decision, trace) = cycle::schedule(&profile, &cluster, &pod, None, &mut Cursor::default(), 100, &Default::default());
        let record = placement_record(&pod, &profile, &decision, trace, Duration::from_millis(1));
        assert_eq!((record.evaluated, record.filters[0].rejected), (5000, 5000));
        assert_eq!(record.filters[0].reasons.len(), crate::explain::MAX_REASONS, "the most frequent few, not 5000");
        let json = serde_json::to_vec(&record).unwrap();
        assert!(json.len() < 4096 && record.weight() < 4096, "{} bytes as JSON, weighs {}", json.len(), record.weight());
    }

    #[test]
    fn status_updates_of_running_pods_requeue_nothing() {
        let updated = |labels_changed, requests_changed| ClusterEvent::PodUpdated { uid: "u".into(), labels_changed, requests_changed };
        assert_eq!(requeue_hint(&updated(false, false)), None, "readiness and restarts");
        assert_eq!(requeue_hint(&updated(true, false)), Some(Change::PodAdded), "only pods waiting for other pods");
        assert_eq!(requeue_hint(&updated(false, true)), Some(Change::PodRemoved));
        assert_eq!(requeue_hint(&ClusterEvent::NodeRemoved { name: "n".into() }), None);
        assert_eq!(requeue_hint(&ClusterEvent::PodBound { uid: "u".into() }), Some(Change::PodAdded));
    }
}
