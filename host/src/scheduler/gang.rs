//! Gangs: the pods of a PodGroup whose policy is `gang` are placed together or not at all, with kube-scheduler
//! v1.37's semantics (GangScheduling's PreEnqueue and Permit, the pod group cycle; docs/gangs.md).
//!
//! A member waits, with no condition written (as kube-scheduler's PreEnqueue holds it), until its PodGroup exists
//! and at least `minCount` members exist, bound or waiting. The member popped then takes every waiting member of
//! its group out of the queue, and one group cycle tries them in queue order through the profile's own policies,
//! each assumed (tentatively: no loop reacts) so the next ones see its room taken. If the bound and placed members
//! reach `minCount` all placed ones are bound; if not, nothing is: every assumption is taken back, and each member
//! is told why (its own `0/N nodes are available` when it did not fit, `pod group is unschedulable, ...` when it
//! did). The PodGroup's `PodGroupInitiallyScheduled` condition says how it went. Once `minCount` members are bound,
//! later ones (replacements, members past `minCount`) are placed one by one.

use super::queue::{HelpedBy, QueuedPod};
use super::{key_of, Attempt, Scheduler};
use crate::cluster::groups::{GroupKey, GroupPolicy, GroupRecord};
use crate::registry::ProfilePolicies;
use crate::scheduler::cycle::{Cursor, Decision, Trace};
use std::sync::Arc;

/// A member placed in the group cycle, waiting for the group's verdict.
struct Placed {
    queued: QueuedPod,
    node: String,
    reserved: Result<Vec<crate::cluster::volumes::ReservedClaim>, String>,
    attempt: Attempt,
}

impl Scheduler {
    /// Schedules a pod that names the pod group `group`: returns it when it is to be placed on its own (a `basic`
    /// group, or a gang with `minCount` members bound already), or handles it (held, or its gang's cycle run).
    pub(super) fn schedule_member(
        self: &Arc<Self>,
        queued: QueuedPod,
        group: &GroupKey,
        profile: &ProfilePolicies,
        percentage: u32,
        cursor: &mut Cursor,
    ) -> Option<QueuedPod> {
        let Some(record) = self.cluster.groups.get(group) else {
            let mut message = format!("waiting for pods's pod group {:?} to appear in scheduling queue", group.name);
            if let Some(why) = self.cluster.groups.unreadable() {
                message.push_str(&format!(" (PodGroups cannot be listed: {why})"));
            }
            self.hold(queued, profile, message);
            return None;
        };
        let GroupPolicy::Gang { min_count } = record.policy else { return Some(queued) };
        let min_count = min_count as usize;
        let members = self.cluster.groups.members(group);
        let scheduled = {
            let state = self.cluster.read();
            members.iter().filter(|uid| state.pod(uid).is_some()).count()
        };
        // Waiting: known, unbound and not assumed (is_pending reads the state itself: not under the guard above).
        let waiting: Vec<String> = members.into_iter().filter(|uid| *uid != queued.pod.uid && self.cluster.is_pending(uid)).collect();
        if scheduled >= min_count {
            return Some(queued);
        }
        if scheduled + 1 + waiting.len() < min_count {
            self.hold(queued, profile, "waiting for minCount pods from a gang to appear in scheduling queue".into());
            return None;
        }
        let mut cycle = vec![queued];
        // Members not in this queue wait for another scheduler (or their event has not come yet).
        let mut elsewhere = Vec::new();
        for uid in &waiting {
            match self.queue.take(uid) {
                Some(member) => cycle.push(member),
                None => elsewhere.extend(self.cluster.pending_pod(uid)),
            }
        }
        // Queue order: priority, then the first queued.
        cycle[1..].sort_by(|a, b| b.pod.priority.cmp(&a.pod.priority).then(a.first_queued.cmp(&b.first_queued)));
        self.group_cycle(cycle, &elsewhere, group, &record, min_count, scheduled, profile, percentage, cursor);
        None
    }

    /// A member that may not be tried yet: it waits for a change of its group (a PodGroup event, a new member)
    /// without a condition or event written; `wasp explain pod` shows why.
    fn hold(&self, queued: QueuedPod, profile: &ProfilePolicies, message: String) {
        tracing::debug!(pod = %key_of(&queued.pod), profile = %profile.scheduler_name, %message, "gang member held");
        let mut held = Attempt {
            decision: Decision::Unschedulable { message, helped_by: HelpedBy::default() },
            trace: Trace::default(),
            took: Default::default(),
            to_provision: Vec::new(),
        };
        held.record(&self.stats, &self.records, &queued.pod, profile);
        self.queue.unschedulable(queued);
    }

    /// One group cycle over the waiting members `cycle` of a gang that has `scheduled` members bound already.
    #[allow(clippy::too_many_arguments)]
    fn group_cycle(
        self: &Arc<Self>,
        cycle: Vec<QueuedPod>,
        elsewhere: &[crate::contract::types::Pod],
        group: &GroupKey,
        record: &GroupRecord,
        min_count: usize,
        scheduled: usize,
        profile: &ProfilePolicies,
        percentage: u32,
        cursor: &mut Cursor,
    ) {
        let first = &cycle[0].pod;
        let mut others = cycle.iter().map(|member| &member.pod).chain(elsewhere);
        if let Some(odd) = others.find(|pod| pod.scheduler_name != first.scheduler_name || pod.priority != first.priority) {
            let message = format!(
                "pods of pod group {:?} must have the same scheduler name and priority: {} has {:?} and {}, {} has {:?} and {}",
                group.name,
                key_of(first),
                first.scheduler_name,
                first.priority,
                key_of(odd),
                odd.scheduler_name,
                odd.priority
            );
            self.set_group_condition(group, record, "SchedulerError", &message);
            for member in cycle {
                self.not_placed_as(member, profile, "SchedulerError", message.clone());
            }
            return;
        }
        tracing::info!(group = %group, members = cycle.len(), scheduled, min_count, profile = %profile.scheduler_name, "group cycle");
        let mut placed: Vec<Placed> = Vec::new();
        let mut failed: Vec<(QueuedPod, Attempt)> = Vec::new();
        let mut untried = cycle.into_iter();
        let mut short_by = None;
        while let Some(member) = untried.next() {
            let attempt = self.attempt(profile, &member.pod, percentage, cursor);
            match &attempt.decision {
                Decision::Bind { node, .. } => {
                    let node = node.clone();
                    let reserved = self.reserve_volumes(&member.pod, &node, &attempt.to_provision);
                    self.cluster.assume_tentatively(member.pod.clone(), &node);
                    placed.push(Placed { queued: member, node, reserved, attempt });
                }
                Decision::Unschedulable { .. } => failed.push((member, attempt)),
            }
            // kube-scheduler's PlacementFeasible: stop as soon as the members left cannot make up minCount.
            let remaining = untried.len();
            if scheduled + placed.len() + remaining < min_count {
                short_by = Some(format!("minCount ({min_count}) cannot be satisfied: {} scheduled, {remaining} remaining", scheduled + placed.len()));
                break;
            }
        }
        let untried: Vec<QueuedPod> = untried.collect();
        match short_by {
            None => {
                tracing::info!(group = %group, bound = placed.len(), "gang placed");
                self.set_group_condition(group, record, "Scheduled", "");
                for mut member in placed {
                    let decision = member.attempt.record(&self.stats, &self.records, &member.queued.pod, profile);
                    tracing::debug!(pod = %key_of(&member.queued.pod), node = %member.node, ?decision, "decided in a group cycle");
                    self.cluster.confirm_assumed(&member.queued.pod.uid);
                    self.bind(member.queued, member.node, profile.scheduler_name.clone(), member.reserved);
                }
                for (member, mut attempt) in failed {
                    self.member_not_placed(member, &mut attempt, profile, false);
                }
            }
            Some(group_message) => {
                tracing::info!(group = %group, placed = placed.len(), failed = failed.len(), %group_message, "gang not placed; nothing bound");
                self.set_group_condition(group, record, "Unschedulable", &group_message);
                // What may help the members that fit is what may help those that did not.
                let helped_by = failed.iter().fold(HelpedBy::default(), |helped, (_, attempt)| match &attempt.decision {
                    Decision::Unschedulable { helped_by, .. } => HelpedBy {
                        pods_added: helped.pods_added || helped_by.pods_added,
                        pods_removed: helped.pods_removed || helped_by.pods_removed,
                        retry_soon: helped.retry_soon || helped_by.retry_soon,
                    },
                    Decision::Bind { .. } => helped,
                });
                let message = format!("pod group is unschedulable, {group_message}");
                for mut member in placed {
                    self.cluster.forget_tentative(&member.queued.pod.uid);
                    // The preemption's policy sees it fits, and leaves its room to it when it looks for room for
                    // the others.
                    self.cluster.note_unschedulable(&member.queued.pod.uid, &message);
                    if let Ok(claims) = &member.reserved {
                        self.cluster.volumes.unreserve(claims);
                    }
                    let decision = Decision::Unschedulable { message: message.clone(), helped_by };
                    member.attempt.record_as(&self.stats, &self.records, &member.queued.pod, profile, decision);
                    self.not_placed(member.queued, &profile.scheduler_name, message.clone(), helped_by, false);
                }
                // The members that did not fit ask for room: the rescheduler's preemption makes it for the whole
                // gang or for none of it (rescheduler::plan::gangs). The members the cycle did not reach are taken
                // for what the first member that did not fit was refused for, so room is looked for them too.
                let refused_for = failed.iter().find_map(|(_, attempt)| match &attempt.decision {
                    Decision::Unschedulable { message, .. } => Some(message.clone()),
                    Decision::Bind { .. } => None,
                });
                for (member, mut attempt) in failed {
                    self.member_not_placed(member, &mut attempt, profile, true);
                }
                for member in untried {
                    if let Some(reason) = &refused_for {
                        self.cluster.note_unschedulable(&member.pod.uid, reason);
                    }
                    let mut held = Attempt {
                        decision: Decision::Unschedulable { message: message.clone(), helped_by },
                        trace: Trace::default(),
                        took: Default::default(),
                        to_provision: Vec::new(),
                    };
                    self.member_not_placed(member, &mut held, profile, false);
                }
            }
        }
    }

    /// A member the cycle did not place, told the reason its attempt gives; with `may_preempt`, it asks for room.
    fn member_not_placed(self: &Arc<Self>, member: QueuedPod, attempt: &mut Attempt, profile: &ProfilePolicies, may_preempt: bool) {
        let Decision::Unschedulable { message, helped_by } = attempt.record(&self.stats, &self.records, &member.pod, profile) else { return };
        self.not_placed(member, &profile.scheduler_name, message, helped_by, may_preempt);
    }

    /// A member that cannot be considered at all: `SchedulerError`, tried again after a backoff.
    fn not_placed_as(self: &Arc<Self>, member: QueuedPod, profile: &ProfilePolicies, reason: &'static str, message: String) {
        let (binder, object, profile_name) =
            (self.binder.clone(), crate::kube::ObjectRef::pod(&member.pod.namespace, &member.pod.name, &member.pod.uid), profile.scheduler_name.clone());
        tracing::info!(pod = %key_of(&member.pod), profile = %profile_name, %message, "gang member cannot be scheduled");
        self.queue.backoff(member);
        self.writes.spawn(async move { binder.not_scheduled(&object, reason, &message, &profile_name).await });
    }

    /// Sets the PodGroup's `PodGroupInitiallyScheduled` condition: True with `Scheduled` once, never False after.
    fn set_group_condition(&self, group: &GroupKey, record: &GroupRecord, reason: &str, message: &str) {
        if record.initially_scheduled() {
            return;
        }
        let status = if reason == "Scheduled" { "True" } else { "False" };
        if record.condition().is_some_and(|known| known.status == status && known.reason == reason && known.message == message) {
            return;
        }
        // Its time is when the status last changed.
        let since = record.condition().filter(|known| known.status == status).map(|known| known.last_transition_time.clone());
        let (binder, group, reason, message) = (self.binder.clone(), group.clone(), reason.to_string(), message.to_string());
        self.writes.spawn(async move { binder.group_condition(&group, status, &reason, &message, since).await });
    }
}
