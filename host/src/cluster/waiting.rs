//! What the loops note about pods that wait for a scheduler, beside the pods themselves: why a scheduler could
//! not place each (the rescheduler's preemption reads it), its `PodScheduled` condition as last read or written,
//! its `preemptionPolicy`, the resource claims it names, and the room nominated for it. One owner, [`SharedCluster`](super::SharedCluster),
//! notes a pod here only while it waits and calls [`WaitingNotes::forget`] when it stops waiting (bound, deleted,
//! finished, gone at a relist), whichever loops run: the notes never outgrow the pending pods.

use super::shared::ScheduledCondition;
use crate::contract::types::Pod;
use crate::shrink::ShrinkWhenSparse;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

/// A pending pod nominated to a node (by preemption): the room made for it, which pods of lower priority may not
/// take (kube-scheduler counts nominated pods of equal or higher priority on their node when it filters a pod).
#[derive(Debug, Clone, PartialEq)]
pub struct Nomination {
    pub uid: String,
    pub priority: i32,
    pub requests: wasp_sdk::resources::ResourceVector,
}

#[derive(Default)]
pub struct WaitingNotes {
    /// Why pending pods could not be placed, as a scheduler last said (by uid).
    unschedulable: Mutex<HashMap<String, String>>,
    /// The `PodScheduled` condition of pending pods as last read or written, by uid.
    scheduled_conditions: Mutex<HashMap<String, ScheduledCondition>>,
    /// Pending pods with `preemptionPolicy: Never`: they wait for room and never take it from other pods.
    never_preempt: Mutex<HashSet<String>>,
    /// Pending pods with `spec.resourceClaims`, by uid: the claims' names. No scheduler of this host binds them
    /// (it allocates no devices), and no room is made for them.
    resource_claims: Mutex<HashMap<String, Vec<String>>>,
    /// Pending pods with a nominated node, by node name.
    nominations: Mutex<HashMap<String, Vec<Nomination>>>,
    /// The pending pods this host nominated itself (preemption), whose `status.nominatedNodeName` the API server
    /// may not show yet: an update of the pod without one does not take their room away.
    own_nominations: Mutex<HashSet<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl WaitingNotes {
    /// Why each pending pod a scheduler tried could not be placed, by uid.
    pub(super) fn reasons(&self) -> MutexGuard<'_, HashMap<String, String>> {
        lock(&self.unschedulable)
    }

    pub(super) fn note_reason(&self, uid: &str, message: &str) {
        lock(&self.unschedulable).insert(uid.to_string(), message.to_string());
    }

    pub(super) fn scheduled_condition(&self, uid: &str) -> Option<ScheduledCondition> {
        lock(&self.scheduled_conditions).get(uid).cloned()
    }

    /// Sets (or, with None, clears) what the pod's condition says; a pod that does not `wait` is cleared.
    pub(super) fn set_scheduled_condition(&self, uid: &str, condition: Option<ScheduledCondition>, waits: bool) {
        let mut conditions = lock(&self.scheduled_conditions);
        match condition {
            Some(condition) if waits => {
                conditions.insert(uid.to_string(), condition);
            }
            _ => {
                conditions.remove(uid);
            }
        }
    }

    pub(super) fn set_preemption_policy(&self, uid: &str, never: bool) {
        let mut never_preempt = lock(&self.never_preempt);
        if never {
            never_preempt.insert(uid.to_string());
        } else {
            never_preempt.remove(uid);
        }
    }

    pub(super) fn may_preempt(&self, uid: &str) -> bool {
        !lock(&self.never_preempt).contains(uid) && !lock(&self.resource_claims).contains_key(uid)
    }

    /// The pod's resource claims (none: it names none); set at every observation of the waiting pod.
    pub(super) fn set_resource_claims(&self, uid: &str, claims: Vec<String>) {
        let mut noted = lock(&self.resource_claims);
        if claims.is_empty() {
            noted.remove(uid);
        } else {
            noted.insert(uid.to_string(), claims);
        }
    }

    pub(super) fn resource_claims(&self, uid: &str) -> Vec<String> {
        lock(&self.resource_claims).get(uid).cloned().unwrap_or_default()
    }

    /// The pod as read from the API server names its nominated node, or none; `waits` says whether it waits.
    pub(super) fn set_nomination(&self, pod: &Pod, waits: bool) {
        let mut own = lock(&self.own_nominations);
        match pod.nominated_node.as_deref() {
            Some(node) => {
                own.remove(&pod.uid);
                drop(own);
                self.hold_room(pod, Some(node), waits);
            }
            // An update written before this host's nomination reached the API server (the pod's own
            // PodScheduled=False, say): the room made for it stays held.
            None if own.contains(&pod.uid) => {}
            None => {
                drop(own);
                self.hold_room(pod, None, waits);
            }
        }
    }

    /// This host nominates the pending `pod` (None: it no longer waits) to `node`, or takes its nomination back.
    pub(super) fn nominate(&self, uid: &str, pod: Option<&Pod>, node: Option<&str>) {
        let mut own = lock(&self.own_nominations);
        match (pod, node) {
            (Some(_), Some(_)) => own.insert(uid.to_string()),
            _ => own.remove(uid),
        };
        drop(own);
        if let Some(pod) = pod {
            self.hold_room(pod, node, true);
        }
    }

    fn hold_room(&self, pod: &Pod, node: Option<&str>, waits: bool) {
        let mut nominations = lock(&self.nominations);
        withdraw_nomination(&mut nominations, &pod.uid);
        if let Some(node) = node.filter(|_| waits) {
            let nomination = Nomination { uid: pod.uid.clone(), priority: pod.priority, requests: super::pod_requests(pod).0 };
            nominations.entry(node.to_string()).or_default().push(nomination);
        }
    }

    pub(super) fn nominations(&self) -> HashMap<String, Vec<Nomination>> {
        lock(&self.nominations).clone()
    }

    /// Everything noted about the pod goes: it no longer waits. (Its preemption policy went when it left the
    /// pending pods: an update takes a pod out and puts it back, re-reading the policy but keeping the rest.)
    pub(super) fn forget(&self, uid: &str) {
        withdraw_nomination(&mut lock(&self.nominations), uid);
        lock(&self.own_nominations).remove(uid);
        lock(&self.scheduled_conditions).remove(uid);
        lock(&self.resource_claims).remove(uid);
        let mut reasons = lock(&self.unschedulable);
        reasons.remove(uid);
        reasons.shrink_when_sparse();
    }

    /// How many pods something is noted about, in any of the notes (tests check nothing outlives its pod).
    #[cfg(test)]
    pub(super) fn noted(&self) -> usize {
        let mut uids: HashSet<String> = lock(&self.unschedulable).keys().cloned().collect();
        uids.extend(lock(&self.scheduled_conditions).keys().cloned());
        uids.extend(lock(&self.never_preempt).iter().cloned());
        uids.extend(lock(&self.resource_claims).keys().cloned());
        uids.extend(lock(&self.own_nominations).iter().cloned());
        uids.extend(lock(&self.nominations).values().flatten().map(|nomination| nomination.uid.clone()));
        uids.len()
    }
}

fn withdraw_nomination(nominations: &mut HashMap<String, Vec<Nomination>>, uid: &str) {
    nominations.retain(|_, held| {
        held.retain(|nomination| nomination.uid != uid);
        !held.is_empty()
    });
}
