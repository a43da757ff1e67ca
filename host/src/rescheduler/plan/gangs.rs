//! Gang-aware preemption: the victims proposed for the waiting members of one gang (a PodGroup with a `gang`
//! policy) are one transaction. Each member's victims are checked as any pending pod's are (envelope, budgets,
//! priorities, the member's own filters on that node); then the members that need no room are placed where their
//! profile would put them, on the cluster as it would be. If the bound members, those given room and those that fit
//! reach `minCount`, the rooms are made; if not, none is: every eviction for the gang is taken back, so no pod is
//! evicted for a gang that would still not be placed. kube-scheduler's group PostFilter asks the same (its
//! simulation must reach `minCount`), and preempts for nobody when a member has `preemptionPolicy: Never`.
//!
//! Members of a gang are never victims here: the envelope protects them (see [`crate::rescheduler::envelope`]).

use super::{Checker, Decision, PlanEntry, Skip};
use crate::cluster::groups::{GroupKey, GroupPolicy};
use crate::cluster::{ClusterState, PodMeta, SharedCluster};
use crate::contract::types::Pod;
use crate::contract::PendingPod;
use crate::scheduler::cycle::{best_node, feasible_nodes};
use std::collections::HashMap;

/// A gang with members waiting, as a plan may make room for it.
#[derive(Debug, Clone)]
pub struct PendingGang {
    pub group: GroupKey,
    pub min_count: usize,
    /// Members bound (or assumed) on a node.
    pub scheduled: usize,
    /// The uids of the members that wait.
    pub members: Vec<String>,
    /// Whether every waiting member may preempt (none has `preemptionPolicy: Never`).
    pub may_preempt: bool,
}

/// The gangs the pending pods of a run belong to, each once: their waiting members are those among `pending`
/// (what the policies are told of), so every room a policy proposes for a member is decided with its gang's.
pub fn pending_gangs(cluster: &SharedCluster, pending: &[PendingPod]) -> Vec<PendingGang> {
    let mut gangs: Vec<PendingGang> = Vec::new();
    for waiting in pending {
        let Some(group) = cluster.groups.group_of(&waiting.pod.uid) else { continue };
        if let Some(gang) = gangs.iter_mut().find(|gang| gang.group == group) {
            gang.members.push(waiting.pod.uid.clone());
            continue;
        }
        let Some(GroupPolicy::Gang { min_count }) = cluster.groups.get(&group).map(|record| record.policy) else { continue };
        let all = cluster.groups.members(&group);
        let scheduled = {
            let state = cluster.read();
            all.iter().filter(|uid| state.pod(uid).is_some()).count()
        };
        // Any waiting member, told of or not (one that may not preempt is not): kube-scheduler's rule for the group.
        let may_preempt = all.iter().filter(|uid| cluster.is_pending(uid)).all(|uid| cluster.may_preempt(uid));
        gangs.push(PendingGang { group, min_count: min_count as usize, scheduled, members: vec![waiting.pod.uid.clone()], may_preempt });
    }
    gangs
}

/// The gang of each waiting member.
pub(super) struct GangIndex<'a> {
    by_member: HashMap<&'a str, &'a PendingGang>,
}

impl<'a> GangIndex<'a> {
    pub(super) fn new(gangs: &'a [PendingGang]) -> GangIndex<'a> {
        GangIndex { by_member: gangs.iter().flat_map(|gang| gang.members.iter().map(move |uid| (uid.as_str(), gang))).collect() }
    }

    pub(super) fn of(&self, uid: &str) -> Option<&'a PendingGang> {
        self.by_member.get(uid).copied()
    }
}

/// What one room made changed in the what-if copy, to be taken back.
pub(super) struct MadeRoom {
    pub beneficiary: String,
    pub node: String,
    pub removed: Vec<(Pod, PodMeta)>,
}

impl Checker<'_> {
    /// Decides the entries `indices` (victims for members of `gang`, in plan order) together.
    pub(super) fn gang_rooms(&mut self, gang: &PendingGang, entries: &[PlanEntry], indices: &[usize], whatif: &mut ClusterState) -> Vec<(usize, Decision)> {
        let refuse = |why: String| indices.iter().map(|index| (*index, Decision::Skip(Skip::Preemption(why.clone())))).collect();
        if !gang.may_preempt {
            return refuse(format!("pod group {} may not preempt: a member has preemptionPolicy Never", gang.group));
        }
        let saved = (self.budgets.clone(), self.counts.clone(), self.rooms.clone());
        let mut made = Vec::new();
        let mut decisions = Vec::new();
        // Each member's victims node by node, in the policy's order: the first node the checks allow is its room.
        let mut done = vec![false; indices.len()];
        for position in 0..indices.len() {
            if done[position] {
                continue;
            }
            let first = &entries[indices[position]];
            let (uid, node) = (first.room_for.as_deref().unwrap_or_default(), first.node.as_str());
            let group: Vec<usize> = (position..indices.len())
                .filter(|other| entries[indices[*other]].room_for.as_deref() == Some(uid) && entries[indices[*other]].node == node)
                .collect();
            let victims: Vec<&PlanEntry> = group.iter().map(|other| &entries[indices[*other]]).collect();
            let (verdicts, room) = self.making_room(uid, &victims, whatif);
            made.extend(room);
            for (other, verdict) in group.into_iter().zip(verdicts) {
                done[other] = true;
                decisions.push((indices[other], verdict));
            }
        }
        // The members given no room, where they would go now; they count only if they fit.
        let mut fitting = Vec::new();
        for uid in gang.members.iter().filter(|uid| !self.rooms.contains_key(*uid)) {
            let Some(pod) = self.pending.get(uid).cloned() else { continue };
            let Some(profile) = self.profile_for(&pod).cloned() else { continue };
            let (feasible, _) = feasible_nodes(&profile, whatif, &pod, &[]);
            let Some(node) = best_node(&profile, whatif, &pod, &feasible).and_then(|id| whatif.node_name(id)).map(str::to_string) else { continue };
            // It takes that room: the next members must fit around it.
            whatif.upsert_pod(pod, &node);
            fitting.push(uid.clone());
        }
        let given_room = gang.members.iter().filter(|uid| self.rooms.contains_key(*uid)).count();
        let placed = gang.scheduled + given_room + fitting.len();
        if placed >= gang.min_count {
            tracing::info!(group = %gang.group, given_room, fitting = fitting.len(), scheduled = gang.scheduled, "room made for a gang");
            // The members that fit without room stay where they would go, so later candidates leave them that room.
            return decisions;
        }
        // Short: everything taken back, so nothing is evicted for this gang.
        for uid in &fitting {
            whatif.remove_pod(uid);
        }
        for room in made.into_iter().rev() {
            whatif.remove_pod(&room.beneficiary);
            for (pod, meta) in room.removed {
                whatif.upsert_pod_with(pod, &room.node, meta);
            }
        }
        (self.budgets, self.counts, self.rooms) = saved;
        let why = format!(
            "pod group {} would still not be placed: minCount ({}) cannot be satisfied: {placed} scheduled ({} bound, {given_room} given room, {} fitting as they are), so no room is made for any member",
            gang.group,
            gang.min_count,
            gang.scheduled,
            fitting.len()
        );
        decisions
            .into_iter()
            .map(|(index, decision)| match decision {
                // A victim the checks refused keeps its own reason.
                Decision::Skip(skip) if skip.kind() != "preemption" || !skip.detail().starts_with("room for ") => (index, Decision::Skip(skip)),
                _ => (index, Decision::Skip(Skip::Preemption(why.clone()))),
            })
            .collect()
    }
}
