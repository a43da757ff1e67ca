//! One scheduling decision, with kube-scheduler's semantics: nominated node first, filters over nodes from a
//! rotating start index until enough feasible nodes are found, weighted normalized scores, random tie-break,
//! and the `0/N nodes are available: ...` message when nothing fits. Pure logic over a [`ClusterState`].

use super::queue::HelpedBy;
use crate::cluster::{ClusterState, Nomination};
use crate::contract::types::{FilterResult, NodeId, Placement, Pod, ViewScope};
use crate::explain::{ScoredNode, TOP_NODES};
use crate::policy::SchedulingPolicy;
use crate::registry::ProfilePolicies;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Bind {
        node: String,
        feasible: usize,
        evaluated: usize,
    },
    /// `helped_by`: which changes may let it fit (see [`Rejections::helped_by`]).
    Unschedulable {
        message: String,
        helped_by: HelpedBy,
    },
}

/// Why nodes were rejected: how many nodes each reason rejected, and whether a policy that sees other pods
/// (topology spread, inter-pod affinity) rejected any, so that a pod bound elsewhere may change the verdict.
#[derive(Debug, Default)]
pub struct Rejections {
    pub reasons: BTreeMap<String, usize>,
    pub by_policy_seeing_pods: bool,
    /// Each filter policy's part, for the decision record.
    pub by_policy: Vec<FilterTally>,
}

/// What one filter policy did over a decision's calls.
#[derive(Debug, Default, Clone)]
pub struct FilterTally {
    pub policy: String,
    pub evaluated: usize,
    pub rejected: usize,
    pub reasons: BTreeMap<String, usize>,
}

impl FilterTally {
    fn add(&mut self, other: FilterTally) {
        self.evaluated += other.evaluated;
        self.rejected += other.rejected;
        for (reason, count) in other.reasons {
            *self.reasons.entry(reason).or_default() += count;
        }
    }
}

/// Rejections a pod leaving a node does not change: the node's own taints, labels and cordon. A reason not listed
/// here (a custom policy's, say) counts as one a removal may help.
const NODE_FIXED_REASONS: [&str; 6] = [
    "node(s) had untolerated taint",
    "node(s) didn't match Pod's node affinity/selector",
    "node(s) were unschedulable",
    "node(s) were marked for maintenance",
    "node(s) didn't match the requested node name",
    "node(s) had volume node affinity conflict",
];

impl Rejections {
    /// Which changes may let a pod rejected for these reasons fit: a bound pod when a policy that sees pods
    /// rejected it, a removed pod unless every reason is the node's own; a policy that failed rather than judged
    /// (its failure mode rejected) may answer on the next try, whatever changes.
    pub fn helped_by(&self) -> HelpedBy {
        let fixed_by_node = |reason: &String| NODE_FIXED_REASONS.iter().any(|fixed| reason.starts_with(fixed));
        HelpedBy {
            pods_added: self.by_policy_seeing_pods,
            pods_removed: !self.reasons.keys().all(fixed_by_node),
            retry_soon: self.reasons.keys().any(|reason| crate::policy::is_failure_reason(reason)),
        }
    }

    fn merge(&mut self, other: Rejections) {
        for (reason, count) in other.reasons {
            *self.reasons.entry(reason).or_default() += count;
        }
        self.by_policy_seeing_pods |= other.by_policy_seeing_pods;
        for tally in other.by_policy {
            let index = self.tally_index(&tally.policy);
            self.by_policy[index].add(tally);
        }
    }

    /// Where `policy`'s tally is, added at the end the first time (the chain's order, as calls come in order).
    fn tally_index(&mut self, policy: &str) -> usize {
        match self.by_policy.iter().position(|tally| tally.policy == policy) {
            Some(index) => index,
            None => {
                self.by_policy.push(FilterTally { policy: policy.to_string(), ..FilterTally::default() });
                self.by_policy.len() - 1
            }
        }
    }

    /// One filter call's verdicts: `per_code[i]` nodes were rejected with reason set `i`.
    fn count(&mut self, policy: &dyn SchedulingPolicy, evaluated: usize, per_code: &[usize], reason_sets: &[Vec<String>]) {
        let rejected: usize = per_code.iter().sum();
        let index = self.tally_index(policy.name());
        let Rejections { reasons: all, by_policy, .. } = self;
        let tally = &mut by_policy[index];
        tally.evaluated += evaluated;
        tally.rejected += rejected;
        for (count, reasons) in per_code.iter().zip(reason_sets).filter(|(count, _)| **count > 0) {
            for reason in reasons {
                *tally.reasons.entry(reason.clone()).or_default() += count;
                *all.entry(reason.clone()).or_default() += count;
            }
        }
        self.by_policy_seeing_pods |= rejected > 0 && policy.view() == ViewScope::NodesAndPods;
    }
}

/// kube-scheduler's `numFeasibleNodesToFind`: all nodes below 100; otherwise a share that shrinks with size
/// (50% minus 1% per 125 nodes, at least 5%), at least 100 nodes.
pub fn feasible_nodes_to_find(nodes: usize, percentage: u32) -> usize {
    const MIN_NODES: usize = 100;
    if nodes < MIN_NODES || percentage >= 100 {
        return nodes;
    }
    let percentage = if percentage == 0 { (50usize.saturating_sub(nodes / 125)).max(5) } else { percentage as usize };
    (nodes * percentage / 100).max(MIN_NODES)
}

/// kube-scheduler's FitError message: reasons counted over nodes, sorted, joined.
pub fn unschedulable_message(total_nodes: usize, reasons: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
    parts.sort();
    format!("0/{total_nodes} nodes are available: {}.", parts.join(", "))
}

/// What one cycle leaves the next: where it starts looking, so consecutive pods spread their search over the
/// cluster, and the share of nodes the last pod found feasible, to size the first chunk of its search (pods
/// come in runs of one workload's replicas: the next pod is likely to find what the last one found).
pub struct Cursor {
    start: usize,
    feasible_share: f64,
}

impl Default for Cursor {
    fn default() -> Cursor {
        Cursor { start: 0, feasible_share: 1.0 }
    }
}

/// How many nodes to filter to find `needed` more feasible ones, when about `share` of the nodes are feasible:
/// a sixteenth more than that estimate, since a chunk that falls just short costs a second chunk, and with it
/// every filter's per-pod work again (inter-pod-affinity's domain counts over every bound pod above all).
fn chunk_for(needed: usize, share: f64) -> usize {
    const LEAST_SHARE: f64 = 1.0 / 64.0;
    let estimate = needed as f64 / share.clamp(LEAST_SHARE, 1.0);
    ((estimate + estimate / 16.0).ceil() as usize).max(64)
}

/// Candidates per thread below which splitting the filter work costs more than it saves.
const MIN_NODES_PER_THREAD: usize = 128;

/// Threads to filter with; asked once (std reads cgroup quota files on every call).
pub fn parallelism() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Threads that call `policy` at once in one filter pass, so instances of it a loop needs ready: one per
/// thread for a policy that sees nodes only, one for a policy that sees pods (see [`filter_in_parallel`]).
pub fn threads_for(policy: &dyn SchedulingPolicy) -> usize {
    match policy.view() {
        ViewScope::Nodes => parallelism(),
        ViewScope::NodesAndPods => 1,
    }
}

/// Runs the filter chain over `candidates` split across threads (each call takes its own pooled policy
/// instance), like kube-scheduler's parallel Filter. Survivors keep their order, and each rejected node's
/// reasons are those of the first policy in the chain that rejected it, as if the chain ran on one thread.
///
/// Only runs of policies that see nodes alone are split. A policy that sees pods is called once over all the
/// candidates: a second thread would take a second instance, which holds its own copy of the pods it keeps
/// (tens of MiB at 50k pods), and would redo the pod's own work (its domain counts) for its half of the nodes.
fn filter_in_parallel(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId], rejections: &mut Rejections) -> Vec<NodeId> {
    let split = |policy: &Arc<dyn SchedulingPolicy>| threads_for(policy.as_ref()) > 1;
    let mut candidates = candidates.to_vec();
    for segment in profile.filters.chunk_by(|first, next| split(first) && split(next)) {
        let threads = threads_for(segment[0].as_ref()).min(candidates.len() / MIN_NODES_PER_THREAD).max(1);
        candidates = if threads == 1 {
            filter_chain(segment, cluster, pod, candidates, rejections)
        } else {
            filter_split(segment, cluster, pod, &candidates, threads, rejections)
        };
    }
    candidates
}

/// The threads that filter in parallel, started once: a thread started per pod (two per split segment, a few
/// thousand a second) cost more in stacks mapped and unmapped and in wake-ups than the filtering it shared out.
/// Its own pool, not rayon's global one, where wasmtime compiles new policy versions.
fn filter_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(parallelism())
            .thread_name(|index| format!("wasp-filter-{index}"))
            .build()
            .expect("the filter threads start")
    })
}

/// [`filter_chain`] over `candidates` cut into one part per thread.
fn filter_split(
    filters: &[Arc<dyn SchedulingPolicy>],
    cluster: &ClusterState,
    pod: &Pod,
    candidates: &[NodeId],
    threads: usize,
    rejections: &mut Rejections,
) -> Vec<NodeId> {
    use rayon::prelude::*;
    let chunk = candidates.len().div_ceil(threads);
    let results: Vec<(Vec<NodeId>, Rejections)> = filter_pool().install(|| {
        candidates
            .par_chunks(chunk)
            .map(|part| {
                let mut local = Rejections::default();
                (filter_chain(filters, cluster, pod, part.to_vec(), &mut local), local)
            })
            .collect()
    });
    let mut survivors = Vec::new();
    for (part, local) in results {
        survivors.extend(part);
        rejections.merge(local);
    }
    survivors
}

/// Runs `filters` in order over `candidates`; returns the survivors and adds rejected nodes' reasons (those of
/// the first policy that rejected each node) to `rejections`.
fn filter_chain(
    filters: &[Arc<dyn SchedulingPolicy>],
    cluster: &ClusterState,
    pod: &Pod,
    mut candidates: Vec<NodeId>,
    rejections: &mut Rejections,
) -> Vec<NodeId> {
    for policy in filters {
        if candidates.is_empty() {
            break;
        }
        let FilterResult { verdicts, rejections: reason_sets } = policy.filter_or_failure_mode(cluster, pod, &candidates);
        let evaluated = candidates.len();
        let mut survivors = Vec::with_capacity(evaluated);
        // Counted per reason set, then per reason: a reason's text is copied once per call, not per node.
        let mut per_code = vec![0usize; reason_sets.len()];
        for (id, code) in candidates.into_iter().zip(verdicts) {
            match code {
                0 => survivors.push(id),
                code => per_code[code as usize - 1] += 1,
            }
        }
        rejections.count(policy.as_ref(), evaluated, &per_code, &reason_sets);
        candidates = survivors;
    }
    candidates
}

/// Every node that can take `pod` under `profile`, except the `excluded` ones (its own node, for the
/// rescheduler's "would it land elsewhere?"), with why the others cannot. Unlike [`schedule`], the search
/// does not stop at `numFeasibleNodesToFind`.
pub fn feasible_nodes(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, excluded: &[&str]) -> (Vec<NodeId>, Rejections) {
    let candidates: Vec<NodeId> = cluster.node_ids().into_iter().filter(|id| cluster.node_name(*id).is_none_or(|name| !excluded.contains(&name))).collect();
    let mut rejections = Rejections::default();
    let feasible = filter_in_parallel(profile, cluster, pod, &candidates, &mut rejections);
    (feasible, rejections)
}

/// The node `profile` would choose for `pod` among the feasible ones (weighted scores, random tie-break).
pub fn best_node(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, feasible: &[NodeId]) -> Option<NodeId> {
    match feasible {
        [] => None,
        [only] => Some(*only),
        _ => Some(best_scored(profile, cluster, pod, feasible)),
    }
}

/// Whether `pod` passes every filter of `profile` on node `id`; if not, the reasons.
pub fn fits_on(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, id: NodeId) -> Result<(), Rejections> {
    let mut rejections = Rejections::default();
    match filter_chain(&profile.filters, cluster, pod, vec![id], &mut rejections).as_slice() {
        [_] => Ok(()),
        _ => Err(rejections),
    }
}

/// What a decision saw, for its record ([`crate::explain::PlacementRecord`]): each filter's part, the best nodes'
/// scores, and how the node was chosen.
#[derive(Debug, Default)]
pub struct Trace {
    /// Nodes in the cluster, nodes filtered, nodes that passed.
    pub nodes: usize,
    pub evaluated: usize,
    pub feasible: usize,
    pub filters: Vec<FilterTally>,
    pub top_nodes: Vec<ScoredNode>,
    pub chosen_by: Option<String>,
}

/// One decision for `pod`, and what it saw. `hint` is the rescheduler's placement for the pod's workload: a
/// required node is the only candidate; a preferred node, like a node nominated by preemption, is tried first.
///
/// `nominations` is the room preemption made for pending pods: a node where the pods nominated to it with a
/// priority at least `pod`'s would no longer fit next to `pod` is rejected, as kube-scheduler's filters reject it
/// with those pods added.
pub fn schedule(
    profile: &ProfilePolicies,
    cluster: &ClusterState,
    pod: &Pod,
    hint: Option<&Placement>,
    cursor: &mut Cursor,
    percentage: u32,
    nominations: &HashMap<String, Vec<Nomination>>,
) -> (Decision, Trace) {
    // The filters, then the room nominated pods keep.
    let fits_here = |id: NodeId| {
        fits_on(profile, cluster, pod, id).and_then(|()| match room_held_for_others(cluster, pod, id, nominations) {
            None => Ok(()),
            Some(reason) => Err(Rejections { reasons: BTreeMap::from([(reason, 1)]), ..Rejections::default() }),
        })
    };
    let nodes = cluster.node_ids();
    if nodes.is_empty() {
        let message = "0/0 nodes are available: no nodes available to schedule pods.".into();
        return (Decision::Unschedulable { message, helped_by: HelpedBy::default() }, Trace::default());
    }
    let bind_on = |id: NodeId, chosen_by: &str| {
        let decision = Decision::Bind { node: cluster.node_name(id).unwrap_or_default().to_string(), feasible: 1, evaluated: 1 };
        (decision, Trace { nodes: nodes.len(), evaluated: 1, feasible: 1, chosen_by: Some(chosen_by.to_string()), ..Trace::default() })
    };
    if let Some(Placement::RequiredNode(name)) = hint {
        if let Some(id) = cluster.node_id(name) {
            return match fits_here(id) {
                Ok(()) => bind_on(id, "the rescheduler's placement hint requires it"),
                Err(rejections) => {
                    let message = format!(
                        "{} (the rescheduler's placement hint requires node {name})",
                        unschedulable_message(1, &rejections.reasons).trim_end_matches('.')
                    );
                    let helped_by = rejections.helped_by();
                    (
                        Decision::Unschedulable { message, helped_by },
                        Trace { nodes: nodes.len(), evaluated: 1, filters: rejections.by_policy, ..Trace::default() },
                    )
                }
            };
        }
    }
    // A node the rescheduler prefers, or one nominated earlier (by preemption), is tried first.
    let preferred = match hint {
        Some(Placement::PreferredNode(name)) => Some((name.as_str(), "the rescheduler's placement hint prefers it")),
        _ => None,
    };
    let nominated = pod.nominated_node.as_deref().map(|name| (name, "nominated for it by preemption"));
    for (name, chosen_by) in preferred.into_iter().chain(nominated) {
        if let Some(id) = cluster.node_id(name).filter(|id| fits_here(*id).is_ok()) {
            return bind_on(id, chosen_by);
        }
    }
    let wanted = feasible_nodes_to_find(nodes.len(), percentage);
    let start = cursor.start % nodes.len();
    let ordered: Vec<NodeId> = nodes[start..].iter().chain(&nodes[..start]).copied().collect();
    let mut rejections = Rejections::default();
    let mut feasible = Vec::new();
    let mut evaluated = 0;
    // Where the search stopped: past the last node it kept, as kube-scheduler counts the nodes it processed.
    let mut searched = 0;
    // Filter in chunks so the search stops once enough feasible nodes are found. Each chunk is sized by the
    // feasible share seen so far (the first by the last pod's): when most nodes fail (a pod's own replicas hold
    // them, to its anti-affinity), chunks of `wanted` nodes would take several calls per pod, and each call redoes
    // the policies' per-pod work, where kube-scheduler's PreFilter does it once.
    let mut chunk = chunk_for(wanted, cursor.feasible_share);
    // Feasible nodes in the chunks filtered, kept or not.
    let mut found = 0;
    while evaluated < ordered.len() {
        let batch = &ordered[evaluated..(evaluated + chunk).min(ordered.len())];
        let passed = filter_in_parallel(profile, cluster, pod, batch, &mut rejections);
        found += passed.len();
        let kept = passed.len().min(wanted - feasible.len());
        feasible.extend_from_slice(&passed[..kept]);
        searched = match feasible.len() == wanted {
            true => evaluated + batch.iter().position(|id| *id == passed[kept - 1]).map_or(batch.len(), |index| index + 1),
            false => evaluated + batch.len(),
        };
        evaluated += batch.len();
        if feasible.len() == wanted {
            break;
        }
        chunk = chunk_for(wanted - feasible.len(), found as f64 / evaluated as f64);
    }
    // A pod that fits nowhere says nothing of the next one's chances (it would send that search over every node).
    if found > 0 {
        cursor.feasible_share = found as f64 / evaluated as f64;
    }
    cursor.start = (start + searched) % nodes.len();
    if !nominations.is_empty() {
        feasible.retain(|id| match room_held_for_others(cluster, pod, *id, nominations) {
            None => true,
            Some(reason) => {
                *rejections.reasons.entry(reason).or_default() += 1;
                false
            }
        });
    }
    let helped_by = rejections.helped_by();
    let filters = std::mem::take(&mut rejections.by_policy);
    let mut trace = Trace { nodes: nodes.len(), evaluated, feasible: feasible.len(), filters, ..Trace::default() };
    let chosen = match feasible.as_slice() {
        [] => {
            let message = unschedulable_message(nodes.len(), &rejections.reasons);
            return (Decision::Unschedulable { message, helped_by }, trace);
        }
        [only] => {
            trace.chosen_by = Some("the only feasible node; not scored".into());
            *only
        }
        _ => {
            let scores = scores(profile, cluster, pod, &feasible);
            let index = best_index(&scores.totals, feasible.len());
            let ties = scores.totals.iter().filter(|total| **total == scores.totals[index]).count();
            trace.chosen_by = Some(match ties {
                _ if profile.scores.is_empty() => format!("drawn among {} feasible nodes: the profile has no score policy", feasible.len()),
                1 => format!("the highest score of {} feasible nodes", feasible.len()),
                ties => format!("the highest score of {} feasible nodes, drawn among {ties} with it", feasible.len()),
            });
            trace.top_nodes = top_nodes(cluster, &feasible, &scores, index);
            feasible[index]
        }
    };
    (Decision::Bind { node: cluster.node_name(chosen).unwrap_or_default().to_string(), feasible: feasible.len(), evaluated }, trace)
}

/// The best [`TOP_NODES`] of `feasible` by total, best first, with the chosen one (`chosen`, an index) among them.
fn top_nodes(cluster: &ClusterState, feasible: &[NodeId], scores: &Scores, chosen: usize) -> Vec<ScoredNode> {
    let mut order: Vec<usize> = (0..feasible.len()).collect();
    // The chosen node first among its equals, so it is kept.
    order.sort_by_key(|index| (std::cmp::Reverse(scores.totals[*index]), *index != chosen));
    order.truncate(TOP_NODES);
    order
        .into_iter()
        .map(|index| ScoredNode {
            node: cluster.node_name(feasible[index]).unwrap_or_default().to_string(),
            scores: scores.by_policy.iter().map(|column| column.get(index).copied().unwrap_or(0)).collect(),
            total: scores.totals[index],
            chosen: index == chosen,
        })
        .collect()
}

/// Why `pod` may not take node `id`: the room there is kept for pending pods nominated to it with at least its
/// priority (their requests and pod slots counted as taken). kube-scheduler's resource reasons.
fn room_held_for_others(cluster: &ClusterState, pod: &Pod, id: NodeId, nominations: &HashMap<String, Vec<Nomination>>) -> Option<String> {
    let held: Vec<&Nomination> =
        nominations.get(cluster.node_name(id)?)?.iter().filter(|nomination| nomination.uid != pod.uid && nomination.priority >= pod.priority).collect();
    if held.is_empty() {
        return None;
    }
    let (node, usage) = cluster.node(id)?;
    if usage.pod_count as usize + held.len() + 1 > node.allocatable_pods as usize {
        return Some("Too many pods".into());
    }
    let mut wanted = crate::cluster::to_vector(&usage.requested);
    for nomination in &held {
        wanted.add(&nomination.requests);
    }
    wanted.add(&crate::cluster::pod_requests(pod).0);
    let allocatable = crate::cluster::to_vector(&node.allocatable);
    let short = [
        ("cpu", wanted.cpu_millis, allocatable.cpu_millis),
        ("memory", wanted.memory_bytes, allocatable.memory_bytes),
        ("ephemeral-storage", wanted.ephemeral_storage_bytes, allocatable.ephemeral_storage_bytes),
    ]
    .into_iter()
    .find(|(_, wanted, available)| wanted > available)
    .map(|(name, _, _)| name.to_string())
    .or_else(|| wanted.scalar.iter().find(|(name, amount)| **amount > allocatable.get(name)).map(|(name, _)| name.clone()))?;
    Some(format!("Insufficient {short}"))
}

/// Weighted sum of every score policy; ties broken uniformly at random.
fn best_scored(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, feasible: &[NodeId]) -> NodeId {
    let totals = score_totals(profile, cluster, pod, feasible);
    feasible[best_index(&totals, feasible.len())]
}

/// Each score policy's normalized scores of the feasible nodes (in the profile's order, each in the nodes'
/// order), and their weighted totals.
pub struct Scores {
    pub by_policy: Vec<Vec<u32>>,
    pub totals: Vec<u64>,
}

pub fn scores(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, feasible: &[NodeId]) -> Scores {
    let mut totals = vec![0u64; feasible.len()];
    let mut by_policy = Vec::with_capacity(profile.scores.len());
    for (policy, weight) in &profile.scores {
        let scores = policy.score_or_failure_mode(cluster, pod, feasible);
        for (total, score) in totals.iter_mut().zip(&scores) {
            *total += *score as u64 * *weight as u64;
        }
        by_policy.push(scores);
    }
    Scores { by_policy, totals }
}

/// `pod`'s weighted score total on each feasible node, in their order.
pub fn score_totals(profile: &ProfilePolicies, cluster: &ClusterState, pod: &Pod, feasible: &[NodeId]) -> Vec<u64> {
    scores(profile, cluster, pod, feasible).totals
}

/// The index of a highest total among the first `among` (random among equals, as kube-scheduler's `selectHost`).
pub fn best_index(totals: &[u64], among: usize) -> usize {
    let totals = &totals[..among];
    let best = totals.iter().copied().max().unwrap_or(0);
    let winners: Vec<usize> = (0..totals.len()).filter(|&index| totals[index] == best).collect();
    winners[fastrand::usize(..winners.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_modes_rejection_asks_for_a_retry_soon_and_a_judgement_does_not() {
        let rejected = |reason: &str| Rejections { reasons: BTreeMap::from([(reason.to_string(), 3)]), ..Rejections::default() }.helped_by();
        assert!(rejected(&crate::policy::failure_reason("misbehaving")).retry_soon);
        assert!(!rejected("node(s) had untolerated taint {maintenance: true}").retry_soon);
        assert!(!rejected("Insufficient cpu").retry_soon);
        assert!(!rejected("policy says the pod failed its checks").retry_soon, "a policy's own words are a judgement");
    }

    #[test]
    fn feasible_node_counts_follow_kube_scheduler() {
        assert_eq!(feasible_nodes_to_find(50, 0), 50);
        assert_eq!(feasible_nodes_to_find(500, 0), 230, "46% of 500");
        assert_eq!(feasible_nodes_to_find(5000, 0), 500, "10% at 5000 nodes");
        assert_eq!(feasible_nodes_to_find(10_000, 0), 500, "floored at 5%");
        assert_eq!(feasible_nodes_to_find(150, 0), 100, "at least 100");
        assert_eq!(feasible_nodes_to_find(1000, 100), 1000);
    }

    /// A filter that rejects the nodes whose name's number `rejects` says, and records what it was asked.
    struct NumberFilter {
        view: ViewScope,
        reason: &'static str,
        rejects: fn(usize) -> bool,
        calls: std::sync::Mutex<Vec<usize>>,
    }

    impl SchedulingPolicy for NumberFilter {
        fn name(&self) -> &str {
            self.reason
        }
        fn view(&self) -> ViewScope {
            self.view
        }
        fn filter_or_failure_mode(&self, cluster: &ClusterState, _pod: &Pod, candidates: &[NodeId]) -> FilterResult {
            self.calls.lock().unwrap().push(candidates.len());
            let number = |id: &NodeId| cluster.node_name(*id).unwrap()[1..].parse::<usize>().unwrap();
            let verdicts = candidates.iter().map(|id| u32::from((self.rejects)(number(id)))).collect();
            FilterResult { verdicts, rejections: vec![vec![self.reason.to_string()]] }
        }
        fn score_or_failure_mode(&self, _: &ClusterState, _: &Pod, candidates: &[NodeId]) -> Vec<u32> {
            vec![0; candidates.len()]
        }
    }

    #[test]
    fn a_filter_that_sees_pods_is_called_once_over_all_candidates_and_reasons_stay_those_of_the_first_rejecting_filter() {
        let cluster = numbered_nodes(600);
        let filter = |view, reason, rejects| Arc::new(NumberFilter { view, reason, rejects, calls: Default::default() });
        let odd = filter(ViewScope::Nodes, "even", |number| number % 2 == 0);
        let sees_pods = filter(ViewScope::NodesAndPods, "three", |number| number % 3 == 0);
        let fives = filter(ViewScope::Nodes, "five", |number| number % 5 == 0);
        let profile = ProfilePolicies { scheduler_name: "test".into(), filters: vec![odd.clone(), sees_pods.clone(), fives.clone()], scores: vec![] };
        let (feasible, rejections) = feasible_nodes(&profile, &cluster, &pod("p", 0, "1"), &[]);

        assert_eq!(*sees_pods.calls.lock().unwrap(), vec![300], "one call over the odd nodes");
        let expected_calls = parallelism().min(600 / MIN_NODES_PER_THREAD);
        assert_eq!(odd.calls.lock().unwrap().len(), expected_calls, "nodes-only filters are still split");
        let numbers: Vec<usize> = feasible.iter().map(|id| cluster.node_name(*id).unwrap()[1..].parse().unwrap()).collect();
        let expected: Vec<usize> = (0..600).filter(|n| n % 2 == 1 && n % 3 != 0 && n % 5 != 0).collect();
        assert_eq!(numbers, expected, "survivors keep the candidates' order");
        let counts: Vec<(&str, usize)> = rejections.reasons.iter().map(|(reason, count)| (reason.as_str(), *count)).collect();
        assert_eq!(counts, vec![("even", 300), ("five", 40), ("three", 100)]);
        assert!(rejections.by_policy_seeing_pods);
    }

    #[test]
    fn the_search_sizes_its_chunks_by_the_feasible_share_so_a_filter_that_sees_pods_is_called_once_a_pod() {
        let cluster = numbered_nodes(2000);
        // A quarter of the nodes feasible, as for a pod whose replicas hold the others, to its anti-affinity.
        let quarter = Arc::new(NumberFilter { view: ViewScope::NodesAndPods, reason: "held", rejects: |number| number % 4 != 0, calls: Default::default() });
        let profile = ProfilePolicies { scheduler_name: "test".into(), filters: vec![quarter.clone()], scores: vec![] };
        let mut cursor = Cursor::default();
        let mut starts = Vec::new();
        for index in 0..3 {
            quarter.calls.lock().unwrap().clear();
            let (decision, trace) = schedule(&profile, &cluster, &pod(&format!("p{index}"), 0, "1"), None, &mut cursor, 10, &HashMap::new());
            assert!(matches!(decision, Decision::Bind { .. }));
            assert_eq!(trace.feasible, 200, "10% of 2000 nodes");
            starts.push(cursor.start);
            let calls = quarter.calls.lock().unwrap().clone();
            match index {
                // 213 nodes (a sixteenth more than wanted) hold 54 feasible; the next 612 the 146 missing.
                0 => assert_eq!(calls, [213, 612], "the second chunk is sized by the share the first found"),
                // 207 feasible of 825: the next pod's first chunk is sized for about a quarter.
                _ => assert!(calls.len() == 1 && calls[0] >= 800, "one call, sized by the share of the pod before: {calls:?}"),
            }
        }
        // The next search starts past the 200th feasible node (every fourth node: 0, 4, .., 796), as
        // kube-scheduler counts the nodes it processed, not past every node of the chunk.
        assert_eq!(starts, [797, 1597, 397]);
    }

    /// Nodes `n0`, `n1`, .. of 4 CPUs, whose numbers [`NumberFilter`] and [`NumberScore`] read.
    fn numbered_nodes(count: usize) -> ClusterState {
        let mut cluster = ClusterState::new();
        for number in 0..count {
            let node = serde_json::json!({"metadata": {"name": format!("n{number}")}, "status": {"allocatable": {"cpu": "4"}}});
            cluster.upsert_node(crate::cluster::convert::node(&serde_json::from_value(node).unwrap()).unwrap());
        }
        cluster
    }

    fn pod(name: &str, priority: i32, cpu: &str) -> Pod {
        let source = serde_json::json!({"metadata": {"name": name, "namespace": "d", "uid": name},
            "spec": {"priority": priority, "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}}}]}});
        crate::cluster::convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn room_nominated_for_a_pod_is_held_from_pods_of_lower_or_equal_priority_only() {
        let mut cluster = ClusterState::new();
        let node = serde_json::json!({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "pods": "3"}}});
        cluster.upsert_node(crate::cluster::convert::node(&serde_json::from_value(node).unwrap()).unwrap());
        cluster.upsert_pod(pod("running", 0, "1"), "n");
        let id = cluster.node_id("n").unwrap();
        let vip = pod("vip", 100, "2500m");
        let nominations =
            HashMap::from([("n".to_string(), vec![Nomination { uid: "vip".into(), priority: 100, requests: crate::cluster::pod_requests(&vip).0 }])]);
        // 1 + 2.5 held + 1 > 4 CPUs.
        assert_eq!(room_held_for_others(&cluster, &pod("replacement", 0, "1"), id, &nominations).as_deref(), Some("Insufficient cpu"));
        assert_eq!(room_held_for_others(&cluster, &pod("equal", 100, "1"), id, &nominations).as_deref(), Some("Insufficient cpu"));
        assert_eq!(room_held_for_others(&cluster, &pod("small", 0, "500m"), id, &nominations), None, "what the nominated pod leaves");
        assert_eq!(room_held_for_others(&cluster, &pod("higher", 101, "1"), id, &nominations), None, "a higher priority is not held back");
        assert_eq!(room_held_for_others(&cluster, &vip, id, &nominations), None, "its own room");
        // Three pod slots: the running pod, the nominated pod and one more.
        cluster.upsert_pod(pod("tiny", 0, "10m"), "n");
        assert_eq!(room_held_for_others(&cluster, &pod("small", 0, "10m"), id, &nominations).as_deref(), Some("Too many pods"));
    }

    /// Scores a node by its name's number.
    struct NumberScore;

    impl SchedulingPolicy for NumberScore {
        fn name(&self) -> &str {
            "by-number"
        }
        fn view(&self) -> ViewScope {
            ViewScope::Nodes
        }
        fn filter_or_failure_mode(&self, _: &ClusterState, _: &Pod, candidates: &[NodeId]) -> FilterResult {
            FilterResult { verdicts: vec![0; candidates.len()], rejections: Vec::new() }
        }
        fn score_or_failure_mode(&self, cluster: &ClusterState, _: &Pod, candidates: &[NodeId]) -> Vec<u32> {
            candidates.iter().map(|id| cluster.node_name(*id).unwrap()[1..].parse().unwrap()).collect()
        }
    }

    #[test]
    fn a_decision_traces_each_filters_part_and_the_best_nodes_scores() {
        let cluster = numbered_nodes(10);
        let filter = |view, reason, rejects| Arc::new(NumberFilter { view, reason, rejects, calls: Default::default() });
        let profile = ProfilePolicies {
            scheduler_name: "test".into(),
            filters: vec![filter(ViewScope::Nodes, "odd", |number| number % 2 == 1), filter(ViewScope::Nodes, "big", |number| number > 6)],
            scores: vec![(Arc::new(NumberScore), 2)],
        };
        let (decision, trace) = schedule(&profile, &cluster, &pod("p", 0, "1"), None, &mut Cursor::default(), 100, &HashMap::new());
        assert_eq!(decision, Decision::Bind { node: "n6".into(), feasible: 4, evaluated: 10 });
        let tallies: Vec<(&str, usize, usize)> = trace.filters.iter().map(|tally| (tally.policy.as_str(), tally.evaluated, tally.rejected)).collect();
        assert_eq!(tallies, [("odd", 10, 5), ("big", 5, 1)], "the second filter sees what the first let through");
        assert_eq!(trace.filters[1].reasons, BTreeMap::from([("big".to_string(), 1)]));
        let top: Vec<(&str, &[u32], u64, bool)> =
            trace.top_nodes.iter().map(|node| (node.node.as_str(), node.scores.as_slice(), node.total, node.chosen)).collect();
        assert_eq!(top, [("n6", &[6][..], 12, true), ("n4", &[4][..], 8, false), ("n2", &[2][..], 4, false)]);
        assert_eq!(trace.chosen_by.as_deref(), Some("the highest score of 4 feasible nodes"));
        assert_eq!((trace.nodes, trace.evaluated, trace.feasible), (10, 10, 4));

        // Nothing fits: the filters' parts say why, the later filter was not asked about rejected nodes.
        let none = ProfilePolicies { scheduler_name: "test".into(), filters: vec![filter(ViewScope::Nodes, "all", |_| true)], scores: vec![] };
        let (decision, trace) = schedule(&none, &cluster, &pod("p", 0, "1"), None, &mut Cursor::default(), 100, &HashMap::new());
        assert!(matches!(decision, Decision::Unschedulable { .. }));
        assert_eq!((trace.filters[0].evaluated, trace.filters[0].rejected, trace.feasible), (10, 10, 0));
        assert!(trace.top_nodes.is_empty());
    }

    #[test]
    fn message_counts_and_sorts_reasons() {
        let reasons = BTreeMap::from([("Insufficient cpu".to_string(), 1), ("node(s) had untolerated taint {k: v}".to_string(), 2)]);
        assert_eq!(unschedulable_message(3, &reasons), "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}.");
    }
}
