//! [`SharedCluster`]: the one view of the cluster every loop of the host reads. The informers write it; loops
//! read the [`ClusterState`], the pending pods, wait on its readiness, and subscribe to its [`ClusterEvent`]s
//! instead of being called by the informers.

use super::waiting::{Nomination, WaitingNotes};
use super::ClusterState;
use crate::contract::types::Pod;
use crate::shrink::ShrinkWhenSparse;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::{broadcast, watch};

/// Events a subscriber may fall behind by before it gets `Lagged` (and resynchronizes from the pending pods).
const EVENT_BUFFER: usize = 1 << 16;

/// What changed in the cluster, as loops care about it.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterEvent {
    /// A node was added, or changed in what policies see (not a status heartbeat).
    NodeChanged {
        name: String,
    },
    NodeRemoved {
        name: String,
    },
    /// A pod is newly on a node (bound by anyone, or first seen bound).
    PodBound {
        uid: String,
    },
    /// A bound pod changed in place: readiness, restarts, labels. Only a change of labels or requests can
    /// matter to a pod waiting for room.
    PodUpdated {
        uid: String,
        labels_changed: bool,
        requests_changed: bool,
    },
    /// A pod stopped using its node: deleted, finished, or gone when the informer relisted.
    PodRemoved {
        uid: String,
    },
    /// A pod waiting for a scheduler (of any name) was added or changed. Shared: the channel preallocates its
    /// slots, and a pod record inline would make each of them as large as a pod.
    PodPending(Arc<Pod>),
    /// A pending pod was bound, deleted or stopped.
    PendingGone {
        uid: String,
    },
    /// A pod that waits for its `schedulingGates` to be removed, first seen so (its status does not say it yet):
    /// no scheduler attempts it.
    PodGated(Arc<Pod>),
    /// A scheduler could not place this pending pod, which may preempt (its `preemptionPolicy` is not `Never`):
    /// the rescheduler's preemption looks for room.
    PreemptionWanted {
        uid: String,
    },
    /// A pending pod the host cannot read (a quantity it cannot parse, say): no scheduler will place it, and its
    /// owner must be told why.
    PodUnreadable(Arc<UnreadablePod>),
    /// A PersistentVolumeClaim, PersistentVolume or StorageClass changed: pods waiting for their claims may fit.
    VolumesChanged,
    /// A PodGroup appeared, went, or changed its policy: its pods may be placed now.
    GroupsChanged,
    /// A pod newly names a pod group: the group's held members may make up its `minCount` now.
    GroupMemberAdded {
        uid: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct UnreadablePod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub scheduler_name: String,
    pub error: String,
}

/// Whether the node, pod and namespace informers have each listed the cluster at least once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    pub nodes: bool,
    pub pods: bool,
    pub namespaces: bool,
    pub claims: bool,
    pub volumes: bool,
    pub storage_classes: bool,
    pub csi_nodes: bool,
    pub pod_groups: bool,
}

impl Synced {
    pub fn all(self) -> bool {
        self.missing().is_empty()
    }

    /// The resources not listed yet, by their plural names.
    pub fn missing(self) -> Vec<&'static str> {
        let listed = [
            (self.nodes, "nodes"),
            (self.pods, "pods"),
            (self.namespaces, "namespaces"),
            (self.claims, "persistentvolumeclaims"),
            (self.volumes, "persistentvolumes"),
            (self.storage_classes, "storageclasses"),
            (self.csi_nodes, "csinodes"),
            (self.pod_groups, "podgroups"),
        ];
        listed.into_iter().filter(|(done, _)| !done).map(|(_, plural)| plural).collect()
    }
}

/// How long a scheduler seen binding a pod counts as running.
const BINDING_SCHEDULER_MEMORY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
const MAX_BINDING_SCHEDULERS: usize = 64;

/// A pod's `PodScheduled` condition: a scheduler writes it only when status, reason or message change, and keeps
/// its `lastTransitionTime` while the status does not (kube-scheduler's `UpdatePodCondition`): a pod that fails
/// every attempt for the same reason costs one write, not one per attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledCondition {
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<String>,
}

pub struct SharedCluster {
    state: RwLock<ClusterState>,
    /// Unbound, live pods of every scheduler, by uid: loops that subscribe late, lag, or gain a profile read them.
    pending: Mutex<HashMap<String, Pod>>,
    /// What the loops note about the pending pods, kept only while they wait.
    notes: WaitingNotes,
    /// Schedulers seen binding pods (a pod that waited became bound), with when last: the webhooks and the
    /// stray-pod check count them as running.
    binding_schedulers: Mutex<HashMap<String, std::time::Instant>>,
    /// Where the rescheduler wants its evicted pods' replacements.
    pub hints: super::PlacementHints,
    /// What pods' claims resolve against.
    pub volumes: super::volumes::VolumeObjects,
    /// The pod groups (gangs), and which pods name which.
    pub groups: super::groups::PodGroups,
    /// Every live pod as the autoscaler reads it, by namespace.
    pub scaled_pods: super::scaled_pods::ScaledPods,
    /// What each namespace's waiting pods hold, and the pods deferred past it.
    pub waiting_budget: super::waiting_budget::WaitingBudget,
    /// The last error of each informer's watch, by resource, until it lists or watches again (a 403 for a
    /// missing RBAC rule, say): readiness says why the host waits.
    watch_errors: Mutex<std::collections::BTreeMap<&'static str, String>>,
    events: broadcast::Sender<ClusterEvent>,
    synced: watch::Sender<Synced>,
}

impl Default for SharedCluster {
    fn default() -> Self {
        SharedCluster {
            state: RwLock::new(ClusterState::new()),
            pending: Mutex::new(HashMap::new()),
            notes: WaitingNotes::default(),
            binding_schedulers: Mutex::new(HashMap::new()),
            hints: super::PlacementHints::default(),
            volumes: Default::default(),
            groups: Default::default(),
            scaled_pods: Default::default(),
            waiting_budget: Default::default(),
            watch_errors: Mutex::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
            synced: watch::channel(Synced::default()).0,
        }
    }
}

impl SharedCluster {
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterState> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, ClusterState> {
        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Events from now on. Subscribe, then read [`pending_pods`](Self::pending_pods): nothing falls between.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events.subscribe()
    }

    pub(super) fn publish(&self, event: ClusterEvent) {
        // No subscriber (a standby with no loop running yet) is fine: loops read the state when they start.
        let _ = self.events.send(event);
    }

    /// A loop placed `pod` on `node` before the API confirms it (the scheduler's assume step): recorded and
    /// published as bound, so every loop counts its requests at once.
    pub fn assume(&self, mut pod: Pod, node: &str) {
        let uid = pod.uid.clone();
        self.volumes.attach(&mut pod);
        self.write().upsert_pod(pod, node);
        self.publish(ClusterEvent::PodBound { uid });
    }

    /// Resolves again what the bound pods' claims attach to their nodes, after a claim, volume or class changed
    /// (a claim provisioned after its pod was bound now names its real volume); returns the pods updated.
    pub fn refresh_attachments(&self) -> Vec<ClusterEvent> {
        let mut state = self.write();
        let stale: Vec<(Pod, String)> = state
            .bound_pods()
            .filter(|(pod, _)| !pod.volume_claims.is_empty())
            .filter_map(|(pod, node)| {
                let mut refreshed = pod.clone();
                self.volumes.attach(&mut refreshed).then(|| (refreshed, node.to_string()))
            })
            .collect();
        stale
            .into_iter()
            .map(|(pod, node)| {
                let uid = pod.uid.clone();
                let meta = state.pod_meta(&uid).cloned().unwrap_or_default();
                state.upsert_pod_with(pod, &node, meta);
                ClusterEvent::PodUpdated { uid, labels_changed: false, requests_changed: false }
            })
            .collect()
    }

    /// Assumes `pod` on `node` for a group cycle, telling no loop yet: the group's next members see its room taken,
    /// and the whole group is then confirmed ([`confirm_assumed`](Self::confirm_assumed)) or taken back
    /// ([`forget_tentative`](Self::forget_tentative)) without a change anyone would react to.
    pub fn assume_tentatively(&self, mut pod: Pod, node: &str) {
        self.volumes.attach(&mut pod);
        self.write().upsert_pod(pod, node);
    }

    /// The tentative assumption of `uid` stands: the loops hear of it as of any assumed pod.
    pub fn confirm_assumed(&self, uid: &str) {
        self.publish(ClusterEvent::PodBound { uid: uid.to_string() });
    }

    /// Takes back a tentative assumption, as quietly as it was made.
    pub fn forget_tentative(&self, uid: &str) {
        self.write().remove_pod(uid);
    }

    /// Takes back an assumption whose binding failed.
    pub fn forget(&self, uid: &str) {
        if self.write().remove_pod(uid) {
            self.publish(ClusterEvent::PodRemoved { uid: uid.to_string() });
        }
    }

    /// Whether the pod still waits for a scheduler: known, unbound and not assumed on a node.
    pub fn is_pending(&self, uid: &str) -> bool {
        let waiting = self.pending().contains_key(uid);
        waiting && self.read().pod(uid).is_none()
    }

    /// Whether the pod exists as far as the informers know: pending, or bound (or assumed) on a node.
    pub fn knows_pod(&self, uid: &str) -> bool {
        self.pending().contains_key(uid) || self.read().pod(uid).is_some()
    }

    /// The pending pod `uid`, if it waits.
    pub fn pending_pod(&self, uid: &str) -> Option<Pod> {
        self.pending().get(uid).cloned()
    }

    pub fn pending_pods(&self) -> Vec<Pod> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).values().cloned().collect()
    }

    /// The pending pods `wanted` keeps, copied out without copying the others.
    pub fn pending_where(&self, wanted: impl Fn(&Pod) -> bool) -> Vec<Pod> {
        self.pending().values().filter(|pod| wanted(pod)).cloned().collect()
    }

    /// The uids of the pending pods `wanted` keeps that a scheduler tried and could not place: a check every few
    /// seconds during a burst of 50k pending pods copies neither the pods nor the uids of those merely queued.
    pub fn unplaced_uids_where(&self, wanted: impl Fn(&Pod) -> bool) -> Vec<String> {
        let waiting = self.pending();
        let reasons = self.notes.reasons();
        reasons.keys().filter(|uid| waiting.get(*uid).is_some_and(&wanted)).cloned().collect()
    }

    /// A scheduler could not place the pending pod `uid`, for `message`; unless the pod never preempts, the
    /// rescheduler's preemption is asked to look for room.
    pub fn note_unschedulable(&self, uid: &str, message: &str) {
        // Noted under the pending pods' lock: a pod that stopped waiting meanwhile is not noted after its notes
        // were cleared.
        let waiting = self.pending();
        if !waiting.contains_key(uid) {
            return;
        }
        self.notes.note_reason(uid, message);
        drop(waiting);
        if self.may_preempt(uid) {
            self.publish(ClusterEvent::PreemptionWanted { uid: uid.to_string() });
        }
    }

    /// A pod naming `scheduler` waited and is now bound: a scheduler of that name runs.
    pub(super) fn note_binding_scheduler(&self, scheduler: &str) {
        let mut seen = self.binding_schedulers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = std::time::Instant::now();
        seen.retain(|_, last| now.duration_since(*last) < BINDING_SCHEDULER_MEMORY);
        // Binding takes a privileged client, so the names are few; the bound keeps a misbehaving one from growing
        // the map.
        if seen.len() < MAX_BINDING_SCHEDULERS || seen.contains_key(scheduler) {
            seen.insert(scheduler.to_string(), now);
        }
    }

    /// The schedulers seen binding a pod within the last day.
    pub fn binding_schedulers(&self) -> Vec<String> {
        let seen = self.binding_schedulers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.iter().filter(|(_, last)| last.elapsed() < BINDING_SCHEDULER_MEMORY).map(|(name, _)| name.clone()).collect()
    }

    /// The pending pod's `PodScheduled` condition, as last read from the API server or written by a scheduler.
    pub fn scheduled_condition(&self, uid: &str) -> Option<ScheduledCondition> {
        self.notes.scheduled_condition(uid)
    }

    /// Sets (or, with None, clears) what the pending pod `uid`'s condition says; ignored for a pod that no longer
    /// waits, so the notes hold waiting pods only.
    pub fn note_scheduled_condition(&self, uid: &str, condition: Option<ScheduledCondition>) {
        let waiting = self.pending();
        self.notes.set_scheduled_condition(uid, condition, waiting.contains_key(uid));
    }

    /// Records a pending pod's `preemptionPolicy`.
    pub(super) fn set_preemption_policy(&self, uid: &str, never: bool) {
        self.notes.set_preemption_policy(uid, never);
    }

    /// Records the resource claims a pending pod names (none: it names none).
    pub(super) fn set_resource_claims(&self, uid: &str, claims: Vec<String>) {
        self.notes.set_resource_claims(uid, claims);
    }

    /// The resource claims (dynamic resource allocation) of the pending pod `uid`, by name; empty for most pods.
    pub fn resource_claims(&self, uid: &str) -> Vec<String> {
        self.notes.resource_claims(uid)
    }

    /// Records where a pending pod is nominated (`status.nominatedNodeName`), or that it is not.
    pub(super) fn set_nomination(&self, pod: &Pod) {
        let waiting = self.pending();
        self.notes.set_nomination(pod, waiting.contains_key(&pod.uid));
    }

    /// Holds room on `node` for the pending pod `uid` from now on (None: no longer), before the API server has
    /// its nomination: preemption's victims may be gone, and their room taken, before the informer sees it.
    pub fn nominate(&self, uid: &str, node: Option<&str>) {
        let waiting = self.pending();
        self.notes.nominate(uid, waiting.get(uid), node);
    }

    /// The pending pods nominated to nodes, by node name (usually none).
    pub fn nominations(&self) -> HashMap<String, Vec<Nomination>> {
        self.notes.nominations()
    }

    /// Whether the pending pod may take room from lower-priority pods (`preemptionPolicy` is not `Never`).
    pub fn may_preempt(&self, uid: &str) -> bool {
        self.notes.may_preempt(uid)
    }

    /// Up to `limit` of the pending pods `wanted` keeps, with why they wait (empty when no scheduler said yet),
    /// highest priority first, then the oldest; only those are copied out. Over the limit, pods a scheduler tried
    /// and could not place come before those it has not tried yet (during a burst, most of them), then by
    /// priority and age. Reasons of pods that no longer wait are forgotten on the way; pods already assumed on a
    /// node are left out.
    pub fn pending_with_reasons(&self, wanted: impl Fn(&Pod) -> bool, limit: usize) -> Vec<(Pod, String)> {
        let waiting = self.pending();
        let reasons = self.notes.reasons();
        let by_priority_then_age = |a: &Pod, b: &Pod| b.priority.cmp(&a.priority).then(a.created_at.cmp(&b.created_at)).then_with(|| a.uid.cmp(&b.uid));
        let mut chosen: Vec<(&Pod, Option<&String>)> = waiting.values().filter(|pod| wanted(pod)).map(|pod| (pod, reasons.get(&pod.uid))).collect();
        if chosen.len() > limit {
            chosen.select_nth_unstable_by(limit, |(a, a_reason), (b, b_reason)| {
                b_reason.is_some().cmp(&a_reason.is_some()).then_with(|| by_priority_then_age(a, b))
            });
            chosen.truncate(limit);
        }
        chosen.sort_unstable_by(|(a, _), (b, _)| by_priority_then_age(a, b));
        let mut pending: Vec<(Pod, String)> = chosen.into_iter().map(|(pod, reason)| (pod.clone(), reason.cloned().unwrap_or_default())).collect();
        drop(reasons);
        drop(waiting);
        // A pod a scheduler has just bound (assumed on its node, the informer not caught up) no longer waits: a
        // preemption for it would evict a second victim for room it already has.
        let state = self.read();
        pending.retain(|(pod, _)| state.pod(&pod.uid).is_none());
        pending
    }

    /// A pod waits for a scheduler (of any name). The label keys its selectors name are selected from now on:
    /// the views of policies that keep `selected` labels need them of the bound pods to decide for it.
    pub(super) fn add_pending(&self, pod: Pod) {
        let keys = super::selected::named_keys(&pod);
        if !keys.is_empty() {
            self.write().select_for_pending(&pod.uid, keys);
        }
        self.pending().insert(pod.uid.clone(), pod);
    }

    /// What is noted about a waiting pod (why it could not be placed, its condition, its nomination) goes when it
    /// no longer waits: the notes hold waiting pods only.
    pub(super) fn stopped_waiting(&self, uid: &str) {
        self.notes.forget(uid);
        self.waiting_budget.release(uid);
    }

    /// The pod no longer waits (deleted, finished); false when it did not.
    pub(super) fn forget_pending(&self, uid: &str) -> bool {
        let removed = self.take_pending(uid);
        self.stopped_waiting(uid);
        if let Some(pod) = &removed {
            self.unselect_pending(pod);
        }
        removed.is_some()
    }

    /// The label keys the pod named while it waited count no more. Called once the pod is recorded where it
    /// went (bound, waiting again): a key it still names never drops to zero in between.
    pub(super) fn unselect_pending(&self, pod: &Pod) {
        if !super::selected::named_keys(pod).is_empty() {
            self.write().unselect_pending(&pod.uid);
        }
    }

    /// Takes the pod out of the waiting pods; its selector keys still count (see [`unselect_pending`]), and its
    /// nomination until it stops waiting ([`stopped_waiting`](Self::stopped_waiting)): an update takes it out and puts it back.
    pub(super) fn take_pending(&self, uid: &str) -> Option<Pod> {
        let mut pending = self.pending();
        let removed = pending.remove(uid);
        pending.shrink_when_sparse();
        drop(pending);
        self.set_preemption_policy(uid, false);
        removed
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pod>> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn synced(&self) -> Synced {
        *self.synced.borrow()
    }

    pub fn is_ready(&self) -> bool {
        self.synced().all()
    }

    /// Records (`Some`) or clears (`None`) the last watch error of `kind`.
    pub(super) fn note_watch_error(&self, kind: &'static str, error: Option<String>) {
        let mut errors = self.watch_errors.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match error {
            Some(error) => errors.insert(kind, error),
            None => errors.remove(kind),
        };
    }

    /// `kind: error` for each informer whose watch fails now.
    pub fn watch_errors(&self) -> Vec<String> {
        self.watch_errors.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().map(|(kind, error)| format!("{kind}: {error}")).collect()
    }

    pub(super) fn mark_synced(&self, update: impl FnOnce(&mut Synced)) {
        self.synced.send_modify(update);
    }

    /// Waits until both informers have listed the cluster: deciding on a partial view would overcommit nodes
    /// (kube-scheduler's WaitForCacheSync).
    pub async fn wait_until_ready(&self) {
        let mut receiver = self.synced.subscribe();
        // The sender lives as long as `self`, so this only ends when ready.
        let _ = receiver.wait_for(|synced| synced.all()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending_pod(name: &str, priority: i32, created_at: i64) -> Pod {
        let source = serde_json::json!({"metadata": {"name": name, "namespace": "d", "uid": name}, "spec": {"containers": [], "priority": priority}});
        let mut pod = super::super::convert::pod(&serde_json::from_value(source).unwrap()).unwrap();
        pod.created_at = created_at;
        pod
    }

    #[test]
    fn a_run_is_told_of_the_highest_priority_then_oldest_pending_pods_up_to_its_limit() {
        let cluster = SharedCluster::default();
        for (name, priority, created_at) in
            [("low-old", 0, 1), ("high-new", 100, 9), ("high-old", 100, 2), ("mid", 50, 5), ("low-new", 0, 8), ("other", 1000, 0)]
        {
            cluster.add_pending(pending_pod(name, priority, created_at));
        }
        cluster.note_unschedulable("mid", "0/3 nodes are available: 3 Insufficient cpu.");
        let names = |limit| -> Vec<(String, String)> {
            cluster.pending_with_reasons(|pod| pod.name != "other", limit).into_iter().map(|(pod, reason)| (pod.name, reason)).collect()
        };
        let told = names(3);
        assert_eq!(told.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["high-old", "high-new", "mid"]);
        assert_eq!(told[2].1, "0/3 nodes are available: 3 Insufficient cpu.", "with why the scheduler could not place it");
        assert_eq!(names(10).len(), 5, "every wanted pod under the limit");
        // A pod the scheduler tried comes before higher-priority pods it has not tried yet, in priority order.
        cluster.note_unschedulable("low-new", "0/3 nodes are available: 3 Too many pods.");
        let told = names(2);
        assert_eq!(told.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["mid", "low-new"]);
        // Assumed on a node by a scheduler (its binding sent, the informer not caught up): it no longer waits.
        cluster.assume(pending_pod("mid", 5, 3), "n1");
        assert!(!names(10).iter().any(|(name, _)| name == "mid"), "an assumed pod gets no room made for it");
    }

    #[test]
    fn a_pod_with_resource_claims_gets_no_room_made_for_it() {
        let cluster = SharedCluster::default();
        let mut events = cluster.subscribe();
        for name in ["plain", "with-gpu"] {
            cluster.add_pending(pending_pod(name, 100, 1));
        }
        cluster.set_resource_claims("with-gpu", vec!["gpu".into()]);
        assert_eq!(cluster.resource_claims("with-gpu"), ["gpu"]);
        assert!(cluster.resource_claims("plain").is_empty());
        assert!(!cluster.may_preempt("with-gpu"), "room would not let the host bind it");
        cluster.note_unschedulable("with-gpu", "0/3 nodes are available: pod has resource claims (gpu).");
        cluster.note_unschedulable("plain", "0/3 nodes are available: 3 Insufficient cpu.");
        let wanted: Vec<ClusterEvent> =
            std::iter::from_fn(|| events.try_recv().ok()).filter(|event| matches!(event, ClusterEvent::PreemptionWanted { .. })).collect();
        assert!(matches!(wanted.as_slice(), [ClusterEvent::PreemptionWanted { uid }] if uid == "plain"), "{wanted:?}");
    }

    #[test]
    fn nothing_noted_about_a_pod_outlives_its_wait_whichever_loops_run() {
        let cluster = SharedCluster::default();
        for name in ["deleted", "bound"] {
            cluster.set_preemption_policy(name, true);
            cluster.add_pending(pending_pod(name, 10, 1));
            cluster.set_resource_claims(name, vec!["gpu".into()]);
            cluster.note_unschedulable(name, "0/3 nodes are available: 3 Insufficient cpu.");
            let condition = ScheduledCondition { status: "False".into(), reason: "Unschedulable".into(), message: "no".into(), last_transition_time: None };
            cluster.note_scheduled_condition(name, Some(condition));
            cluster.nominate(name, Some("n1"));
        }
        assert_eq!(cluster.notes.noted(), 2);
        assert!(cluster.forget_pending("deleted"), "deleted, as the informer forgets it");
        let bound = cluster.take_pending("bound").unwrap();
        cluster.stopped_waiting(&bound.uid);
        assert_eq!(cluster.notes.noted(), 0, "no rescheduler ran to prune them");
        assert!(cluster.nominations().is_empty());
        // A scheduler's verdict that arrives after the pod stopped waiting is not kept.
        cluster.note_unschedulable("deleted", "late");
        cluster.note_scheduled_condition(
            "deleted",
            Some(ScheduledCondition { status: "False".into(), reason: "r".into(), message: "m".into(), last_transition_time: None }),
        );
        cluster.nominate("deleted", Some("n1"));
        assert_eq!(cluster.notes.noted(), 0);
    }
}
