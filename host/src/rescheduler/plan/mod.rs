//! One rescheduling plan: every strategy proposes on a what-if copy of the cluster, and each candidate, in
//! order, passes the safety envelope (protections, PodDisruptionBudget retries, backoff, pacing, limits,
//! budgets) and the fit check: on the copy without the pods planned so far, the pod's own scheduler profile
//! must place it on another node. A planned pod moves to that node in the copy, so later candidates see the
//! room it takes (cascades count). Then each strategy that planned a move is asked again on the copy after the
//! moves, with every moved pod in the form of its replacement: a move it would propose again does not settle
//! what the strategy measures (a duplicate moved onto a node that now holds too many), so it is left out and the
//! plan is made again without it. The caller evicts.
//!
//! [`gangs`]: the victims for the waiting members of one gang are one transaction: every room the gang needs to
//! reach its `minCount`, or none.

pub mod gangs;

use super::budgets::Budgets;
use super::envelope::Envelope;
use super::memory::{Memory, Workload};
use crate::cluster::{ClusterState, PodMeta};
use crate::config::ReschedulerSection;
use crate::contract::types::{ContainerState, Eviction, NodeId, Placement, Pod};
use crate::contract::EvictContext;
use crate::explain::{CheckStep, EvictionRecord};
use crate::policy::{LoadedPolicy, Prepared};
use crate::registry::Plans;
use crate::registry::ProfilePolicies;
use crate::runtime::CallError;
use crate::scheduler::cycle::{best_index, best_node, feasible_nodes, fits_on, score_totals, unschedulable_message};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;
// tokio's clock: pacing and backoff follow simulated time under `wasp simulate` (see `crate::clock`).
use tokio::time::Instant;

/// Why a candidate stays where it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Skip {
    Protected(String),
    /// A PodDisruptionBudget refuses it now, or refused it recently.
    Budget(String),
    Backoff(String),
    Pacing(String),
    Limit(String),
    /// The run already evicts `maxPerWorkload` pods of the pod's workload; the next run after their
    /// replacements are Ready may take it.
    WorkloadLimit(String),
    /// The pod would not land on another node (or no wasp profile can say where it would).
    NoFit(String),
    /// Evicting it would not make the room a policy asked for (preemption's rules).
    Preemption(String),
    /// Its strategy would propose its replacement again: the move does not settle what the strategy measures.
    Unsettled(String),
}

impl Skip {
    /// Whether someone must act for the pod to go (a budget, no other node, an annotation), rather than wait.
    pub fn actionable(&self) -> bool {
        match self {
            Skip::Budget(_) | Skip::NoFit(_) => true,
            Skip::Protected(detail) => detail.contains("is neither never nor allow"),
            Skip::Backoff(_) | Skip::Pacing(_) | Skip::Limit(_) | Skip::WorkloadLimit(_) | Skip::Preemption(_) | Skip::Unsettled(_) => false,
        }
    }

    /// Whether the pod keeps its node from being emptied as things stand: a budget, no other node, or a
    /// protection someone must lift (a bare pod, local storage, an annotation). DaemonSet, static and terminating
    /// pods do not: a drain leaves them, as `kubectl drain` does (the envelope's wording, `envelope::protection`).
    pub fn blocks_node(&self) -> bool {
        match self {
            Skip::Budget(_) | Skip::NoFit(_) => true,
            Skip::Protected(detail) => !["DaemonSet pod", "static pod", "already terminating"].iter().any(|left| detail.starts_with(left)),
            _ => false,
        }
    }

    /// The label of the skip in metrics and the plan table.
    pub fn kind(&self) -> &'static str {
        match self {
            Skip::Protected(_) => "protected",
            Skip::Budget(_) => "pdb",
            Skip::Backoff(_) => "backoff",
            Skip::Pacing(_) => "pacing",
            Skip::Limit(_) | Skip::WorkloadLimit(_) => "limit",
            Skip::NoFit(_) => "no-fit",
            Skip::Preemption(_) => "preemption",
            Skip::Unsettled(_) => "unsettled",
        }
    }

    /// Whether the pod only waits for its workload's replacement to be Ready: the next run should come soon.
    pub fn waits_for_replacement(&self) -> bool {
        matches!(self, Skip::Pacing(_) | Skip::WorkloadLimit(_))
    }

    pub fn detail(&self) -> &str {
        match self {
            Skip::Protected(detail)
            | Skip::Budget(detail)
            | Skip::Backoff(detail)
            | Skip::Pacing(detail)
            | Skip::Limit(detail)
            | Skip::WorkloadLimit(detail)
            | Skip::NoFit(detail)
            | Skip::Preemption(detail)
            | Skip::Unsettled(detail) => detail,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Evict; the fit check places the pod on `target`.
    Evict {
        target: String,
    },
    /// Evict to make room on `node` for the pending pod `beneficiary` (`namespace/name`), then nominate the node
    /// for it.
    Preempt {
        beneficiary: String,
        node: String,
    },
    /// Clear away a failed pod: it holds nothing and goes nowhere (its controller replaced it already).
    Clear,
    Skip(Skip),
}

/// What happened to a planned eviction.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Evicted,
    /// Dry run: nothing was sent.
    NotSent,
    /// 429 from the Eviction API: a PodDisruptionBudget refused it; retried after `retry`.
    RefusedByBudget {
        retry: Duration,
    },
    /// The pod was already gone.
    Gone,
    Failed(String),
}

impl Outcome {
    /// The `result` label of `wasp_rescheduler_evictions_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Evicted => "evicted",
            Outcome::NotSent => "dry-run",
            Outcome::RefusedByBudget { .. } => "refused-by-pdb",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "error",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PlanEntry {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub workload: Option<Workload>,
    pub policy: String,
    /// The policy's reason.
    pub reason: String,
    pub decision: Decision,
    /// Set once the eviction was tried (or not, in a dry run).
    pub outcome: Option<Outcome>,
    /// The pending pod (uid) the policy evicts this one to make room for.
    pub room_for: Option<String>,
    /// Where the policy wants the replacement.
    pub placement: Option<Placement>,
    /// For a planned eviction, the uids of its workload's pods at planning time: a pod not among them later is
    /// the replacement pacing waits for.
    pub siblings: Arc<HashSet<String>>,
}

impl PlanEntry {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn target(&self) -> Option<&str> {
        match &self.decision {
            Decision::Evict { target } => Some(target),
            Decision::Preempt { .. } | Decision::Clear | Decision::Skip(_) => None,
        }
    }

    /// What `wasp explain eviction` shows of this entry: the envelope's checks in the order the checker runs them,
    /// the one that left the pod (if one did), and what the Eviction API said.
    pub fn record(&self, at: &str) -> EvictionRecord {
        // The order of `Checker::held`, then the fit check (for preemption, the room made), then the settling.
        const CHECKS: [(&str, &[&str]); 7] = [
            ("protection", &["protected"]),
            ("disruption budget", &["pdb"]),
            ("backoff", &["backoff"]),
            ("pacing", &["pacing"]),
            ("limits", &["limit"]),
            ("fit elsewhere", &["no-fit", "preemption"]),
            ("settles", &["unsettled"]),
        ];
        let refused = match &self.decision {
            Decision::Skip(skip) => Some((skip.kind(), skip.detail())),
            _ => None,
        };
        // maxPerRun is looked at before anything else: reached, it is the only check made.
        let run_full = refused.is_some_and(|(kind, detail)| kind == "limit" && detail.starts_with("maxPerRun"));
        let mut reached = true;
        let checks = CHECKS
            .iter()
            .map(|(check, kinds)| {
                let (verdict, detail) = match refused.filter(|(kind, _)| kinds.contains(kind)) {
                    Some((_, detail)) => {
                        reached = false;
                        ("refused", Some(detail.to_string()))
                    }
                    None if !reached || run_full => ("not reached", None),
                    None => ("passed", None),
                };
                CheckStep { check: check.to_string(), verdict: verdict.to_string(), detail }
            })
            .collect();
        let (decision, room_for) = match &self.decision {
            Decision::Evict { .. } => ("evict", None),
            Decision::Preempt { beneficiary, node } => ("preempt", Some(format!("{beneficiary} on {node}"))),
            Decision::Clear => ("clear", None),
            Decision::Skip(_) => ("skip", None),
        };
        let outcome = match (&self.outcome, &self.decision) {
            (_, Decision::Skip(_)) => None,
            (None, _) => Some("not sent: the host was stopping".to_string()),
            (Some(Outcome::Evicted), _) => Some("evicted".to_string()),
            (Some(Outcome::NotSent), _) => Some("dry run: nothing sent".to_string()),
            (Some(Outcome::RefusedByBudget { retry }), _) => {
                Some(format!("refused by a PodDisruptionBudget; tried again in {}", humantime::format_duration(*retry)))
            }
            (Some(Outcome::Gone), _) => Some("already gone".to_string()),
            (Some(Outcome::Failed(error)), _) => Some(format!("failed: {error}")),
        };
        EvictionRecord {
            pod: self.key(),
            uid: self.uid.clone(),
            node: self.node.clone(),
            at: at.to_string(),
            policy: self.policy.clone(),
            reason: self.reason.clone(),
            workload: self.workload.as_ref().map(|workload| workload.to_string()),
            decision: decision.to_string(),
            target: self.target().map(str::to_string),
            room_for,
            checks,
            outcome,
        }
    }
}

/// A strategy that failed this run: it evicts nothing, the others go on.
#[derive(Debug, Clone)]
pub struct PolicyFailure {
    pub policy: String,
    pub error: String,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub entries: Vec<PlanEntry>,
    pub failures: Vec<PolicyFailure>,
    /// Per strategy: how long `propose` took and how many pods it proposed.
    pub proposals: Vec<(String, Duration, usize)>,
    /// Time of the envelope and fit check over every candidate.
    pub checks: Duration,
    /// Problems with the inputs the plan could not fix (budgets unreadable, say).
    pub warnings: Vec<String>,
    pub dry_run: bool,
}

impl Plan {
    pub fn evictions(&self) -> impl Iterator<Item = &PlanEntry> {
        self.entries.iter().filter(|entry| !matches!(entry.decision, Decision::Skip(_)))
    }

    /// The plan as a table: pod, node, policy, decision (where the fit check places it, or why it stays) and
    /// why the policy proposed it.
    pub fn table(&self) -> String {
        let mut rows = vec![["POD".to_string(), "NODE".into(), "POLICY".into(), "DECISION".into(), "WHY".into()]];
        for entry in &self.entries {
            let done = match &entry.outcome {
                None | Some(Outcome::Evicted) => String::new(),
                Some(Outcome::NotSent) => " (dry run)".into(),
                Some(Outcome::RefusedByBudget { retry }) => format!(" (refused by a PodDisruptionBudget; retry in {})", humantime::format_duration(*retry)),
                Some(Outcome::Gone) => " (already gone)".into(),
                Some(Outcome::Failed(error)) => format!(" (failed: {error})"),
            };
            let (decision, why) = match &entry.decision {
                Decision::Evict { target } => (format!("evict -> {target}{done}"), entry.reason.clone()),
                Decision::Preempt { beneficiary, node } => (format!("evict, room for {beneficiary} on {node}{done}"), entry.reason.clone()),
                Decision::Clear => (format!("evict failed pod{done}"), entry.reason.clone()),
                Decision::Skip(skip) => (format!("skip: {}", skip.kind()), format!("{} (proposed: {})", skip.detail(), entry.reason)),
            };
            rows.push([entry.key(), entry.node.clone(), entry.policy.clone(), decision, why]);
        }
        let widths: Vec<usize> = (0..4).map(|column| rows.iter().map(|row| row[column].chars().count()).max().unwrap_or(0)).collect();
        let mut text = String::new();
        for row in &rows {
            for (column, width) in widths.iter().enumerate() {
                text.push_str(&format!("{:<width$}   ", row[column], width = *width));
            }
            text.push_str(&row[4]);
            text.push('\n');
        }
        for failure in &self.failures {
            text.push_str(&format!("policy {} failed and proposes nothing this run: {}\n", failure.policy, failure.error));
        }
        for warning in &self.warnings {
            text.push_str(&format!("warning: {warning}\n"));
        }
        let evictions = self.evictions().count();
        text.push_str(&format!("{} candidates, {} to evict{}\n", self.entries.len(), evictions, if self.dry_run { " (dry run: nothing evicted)" } else { "" }));
        text
    }
}

/// What a plan is made from, besides the cluster.
pub struct Inputs<'a> {
    pub section: &'a ReschedulerSection,
    pub plans: &'a Plans,
    pub memory: &'a Memory,
    pub budgets: Budgets,
    pub now: Instant,
    /// Seconds since the Unix epoch.
    pub wall: i64,
    /// What a moved pod's claims resolve against: a pod with a zonal disk only moves within its zone.
    pub volumes: &'a crate::cluster::volumes::VolumeObjects,
    /// The host's own namespaces, protected with kube-system.
    pub host_namespaces: &'a [&'a str],
    /// The gangs whose waiting members the pending pods are ([`gangs::pending_gangs`]).
    pub gangs: &'a [gangs::PendingGang],
}

/// Evictions counted against the limits within a run.
#[derive(Default, Clone)]
struct Counts {
    total: u32,
    per_node: HashMap<String, u32>,
    per_namespace: HashMap<String, u32>,
    per_workload: HashMap<Workload, u32>,
}

impl Counts {
    fn limit_reached(&self, section: &ReschedulerSection, node: &str, namespace: &str, workload: Option<&Workload>) -> Option<Skip> {
        let limits = &section.limits;
        let reached = |limit: Option<u32>, count: u32| limit.filter(|limit| count >= *limit);
        if let Some(limit) = reached(limits.max_per_run, self.total) {
            return Some(Skip::Limit(format!("maxPerRun {limit} reached")));
        }
        if let Some(limit) = reached(limits.max_per_node, self.per_node.get(node).copied().unwrap_or(0)) {
            return Some(Skip::Limit(format!("maxPerNode {limit} reached on node {node}")));
        }
        if let Some(limit) = reached(limits.max_per_namespace, self.per_namespace.get(namespace).copied().unwrap_or(0)) {
            return Some(Skip::Limit(format!("maxPerNamespace {limit} reached in namespace {namespace}")));
        }
        let workload = workload?;
        let limit = reached(limits.max_per_workload, self.per_workload.get(workload).copied().unwrap_or(0))?;
        Some(Skip::WorkloadLimit(format!("maxPerWorkload {limit} reached for {workload}")))
    }

    fn add(&mut self, node: &str, namespace: &str, workload: Option<&Workload>) {
        self.total += 1;
        *self.per_node.entry(node.to_string()).or_default() += 1;
        *self.per_namespace.entry(namespace.to_string()).or_default() += 1;
        if let Some(workload) = workload {
            *self.per_workload.entry(workload.clone()).or_default() += 1;
        }
    }
}

/// Each workload's pods: uid and whether it is Ready.
fn pods_by_workload(cluster: &ClusterState) -> HashMap<Workload, Vec<(String, bool)>> {
    let mut workloads: HashMap<Workload, Vec<(String, bool)>> = HashMap::new();
    for (pod, _) in cluster.bound_pods() {
        if let Some(workload) = Workload::of(pod) {
            workloads.entry(workload).or_default().push((pod.uid.clone(), pod.ready));
        }
    }
    workloads
}

/// How many times at most a plan is checked, each time without the moves its strategies would make again.
const SETTLING_ROUNDS: usize = 3;

/// What every strategy proposed on one moment of the cluster, with a what-if copy of that moment.
pub struct Proposals<'a> {
    /// The strategies, asked again once the plan's moves are known.
    policies: &'a [Arc<LoadedPolicy>],
    /// Whether the strategies' instances stay between runs (else those made for a call are dropped after it).
    keep_warm: bool,
    whatif: ClusterState,
    context: EvictContext,
    answers: Vec<(String, Duration, Result<Vec<Eviction>, String>)>,
}

impl Proposals<'static> {
    /// Proposals made without asking a strategy here (a property test's, say), by strategy name, on `whatif`:
    /// the plan asks no strategy again.
    pub fn given(whatif: ClusterState, context: EvictContext, answers: Vec<(String, Vec<Eviction>)>) -> Proposals<'static> {
        let answers = answers.into_iter().map(|(policy, evictions)| (policy, Duration::ZERO, Ok(evictions))).collect();
        Proposals { policies: &[], keep_warm: false, whatif, context, answers }
    }
}

/// Forks `live` while holding it, then lets go of it (the informers write on meanwhile) and asks each strategy.
/// With `keep_warm`, each strategy's instance is synced with `live` before the fork and follows the live state
/// from run to run, receiving only the deltas since the last run; otherwise each gets the fork whole and is
/// dropped after its call. The scheduling policies the fit check will call are brought to the live state first
/// (`fit_check`), so on the fork they receive only the plan's few moves, and they come back by undoing them.
pub fn propose<'a, State: Deref<Target = ClusterState>>(
    policies: &'a [Arc<LoadedPolicy>],
    fit_check: &Plans,
    live: State,
    context: EvictContext,
    keep_warm: bool,
) -> Proposals<'a> {
    let scheduling = fit_check.scheduling_policies();
    for policy in &scheduling {
        policy.warm(&live, crate::scheduler::cycle::threads_for(policy.as_ref()));
    }
    let prepare = |policy: &'a Arc<LoadedPolicy>, state: &ClusterState| {
        let started = Instant::now();
        let instance = policy.prepare(state);
        (policy, started.elapsed(), instance)
    };
    // Warm instances follow the live state and get what they missed while it is held. Cold ones get a full copy
    // from the fork, so the live state is not held for it, and are dropped after their call (unless the scheduler
    // uses the policy too); they are synced and called on every core at once, so as many copies exist as cores:
    // a copy of 50k pods takes ~0.4 s to send, and five strategies one after another took 2.5-3 s.
    let warm: Option<Vec<_>> = keep_warm.then(|| policies.iter().map(|policy| prepare(policy, &live)).collect());
    let whatif = live.fork();
    drop(live);
    let call = |(policy, syncing, prepared): (&'a Arc<LoadedPolicy>, Duration, Result<Prepared<'a>, CallError>)| {
        let started = Instant::now();
        let answer = prepared.and_then(|prepared| prepared.propose(&whatif, &context)).map_err(|error| error.to_string());
        if !keep_warm && !scheduling.iter().any(|other| other.name() == policy.name()) {
            policy.release_idle();
        }
        (policy.name().to_string(), syncing + started.elapsed(), answer)
    };
    let answers = match warm {
        Some(prepared) => prepared.into_iter().map(call).collect(),
        // One strategy per task, so that a core that is done takes the next one (halves of the list left one core
        // with three strategies that keep pods); collected in the strategies' order, which the plan reads them in.
        None => policies.par_iter().with_max_len(1).map(|policy| call(prepare(policy, &whatif))).collect(),
    };
    Proposals { policies, keep_warm, whatif, context, answers }
}

/// Builds the plan of one run: the proposals, checked in order on their what-if copy, which the checks change as
/// they go; then made again without the moves that would not settle ([`unsettled`]).
pub fn plan(inputs: Inputs<'_>, proposals: Proposals<'_>) -> Plan {
    let Inputs { section, plans, memory, budgets, now, wall, volumes, host_namespaces, gangs } = inputs;
    let Proposals { policies, keep_warm, whatif, context, answers } = proposals;
    let mut plan = Plan { dry_run: section.dry_run, ..Plan::default() };
    let mut proposed = HashSet::new();
    for (policy, took, answer) in answers {
        let proposals = match answer {
            Ok(proposals) => proposals,
            Err(error) => {
                tracing::warn!(%policy, %error, "evict policy failed; it proposes nothing this run");
                plan.proposals.push((policy.clone(), took, 0));
                plan.failures.push(PolicyFailure { policy, error });
                continue;
            }
        };
        plan.proposals.push((policy.clone(), took, proposals.len()));
        for eviction in proposals {
            let failed = whatif.failed_by_id(eviction.pod).map(|failed| (&failed.pod, failed.node.as_str()));
            let Some((pod, node)) = whatif.pod_by_id(eviction.pod).or(failed) else { continue };
            // The first strategy to propose a pod names it; later ones add nothing.
            if !proposed.insert(pod.uid.clone()) {
                continue;
            }
            plan.entries.push(PlanEntry {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                node: node.to_string(),
                workload: Workload::of(pod),
                policy: policy.clone(),
                reason: eviction.reason,
                // A failed pod holds no room, and its replacement exists already.
                room_for: eviction.room_for.filter(|_| failed.is_none()),
                placement: eviction.placement.filter(|_| failed.is_none()),
                decision: Decision::Skip(Skip::Limit(String::new())),
                outcome: None,
                siblings: Arc::default(),
            });
        }
    }
    let started = Instant::now();
    let workloads = pods_by_workload(&whatif);
    let pending: HashMap<String, Pod> = context.pending.iter().map(|pending| (pending.pod.uid.clone(), pending.pod.clone())).collect();
    let checker = || Checker {
        section,
        plans,
        memory,
        envelope: Envelope::new(&section.protections, host_namespaces),
        workloads: workloads.clone(),
        pending: pending.clone(),
        budgets: budgets.clone(),
        counts: Counts::default(),
        workload_verdicts: HashMap::new(),
        rooms: HashMap::new(),
        gangs: gangs::GangIndex::new(gangs),
        now,
        wall,
        volumes,
    };
    // The copy as proposed, for a round without the unsettled moves; none is needed when nothing was proposed.
    let proposed_state = (!plan.entries.is_empty()).then(|| whatif.fork());
    let mut whatif = whatif;
    let mut unsettled_moves: HashMap<String, String> = HashMap::new();
    for round in 1..=SETTLING_ROUNDS {
        check(&mut plan.entries, &mut whatif, checker(), &unsettled_moves);
        // The last round's moves stand as checked: leaving one out without a round of its own could overfill a
        // node another move was checked to fit on; pacing and maxPerWorkload bound what they cost.
        if round == SETTLING_ROUNDS {
            break;
        }
        let again = unsettled(policies, keep_warm, plans, &plan.entries, &mut whatif, &context);
        let Some(proposed) = proposed_state.as_ref().filter(|_| !again.is_empty()) else { break };
        tracing::info!(round, moves = again.len(), "rescheduling plan: moves a strategy would make again are left out");
        unsettled_moves.extend(again);
        whatif = proposed.fork();
    }
    plan.checks = started.elapsed();
    plan
}

/// One round of checks over every candidate, in order, on `whatif`, which the planned moves change as they go.
/// The moves in `unsettled` are not made: each stays, with its reason.
fn check(entries: &mut [PlanEntry], whatif: &mut ClusterState, mut checker: Checker<'_>, unsettled: &HashMap<String, String>) {
    let mut decided = vec![false; entries.len()];
    for index in 0..entries.len() {
        if decided[index] {
            continue;
        }
        if let Some(reason) = unsettled.get(&entries[index].uid).filter(|_| entries[index].room_for.is_none()) {
            decided[index] = true;
            entries[index].decision = Decision::Skip(Skip::Unsettled(reason.clone()));
            entries[index].siblings = Arc::default();
            continue;
        }
        // The victims for a gang's waiting members, on every node, are decided together.
        if let Some(gang) = entries[index].room_for.as_deref().and_then(|uid| checker.gangs.of(uid)) {
            let members: Vec<usize> = (index..entries.len())
                .filter(|other| !decided[*other] && entries[*other].room_for.as_deref().is_some_and(|uid| gang.members.iter().any(|member| member == uid)))
                .collect();
            for (member, decision) in checker.gang_rooms(gang, entries, &members, whatif) {
                decided[member] = true;
                settle(&mut entries[member], decision, &checker);
            }
            continue;
        }
        // Victims for one pending pod on one node are one group; a policy may offer several nodes for a pod, in
        // its order of preference, and the first group the checks allow is taken.
        let group: Vec<usize> = match &entries[index].room_for {
            None => vec![index],
            Some(uid) => same_room(entries, index, uid, &entries[index].node),
        };
        let decisions = match &entries[index].room_for {
            None if whatif.failed_pod(&entries[index].uid).is_some() => vec![checker.clearing(&entries[index], whatif)],
            None => vec![checker.moving(&entries[index], whatif)],
            Some(uid) => {
                let victims: Vec<&PlanEntry> = group.iter().map(|member| &entries[*member]).collect();
                checker.making_room(uid, &victims, whatif).0
            }
        };
        for (member, decision) in group.into_iter().zip(decisions) {
            decided[member] = true;
            settle(&mut entries[member], decision, &checker);
        }
    }
}

/// The entries from `index` on that make room for the pending pod `uid` on `node`.
fn same_room(entries: &[PlanEntry], index: usize, uid: &str, node: &str) -> Vec<usize> {
    (index..entries.len()).filter(|other| entries[*other].room_for.as_deref() == Some(uid) && entries[*other].node == node).collect()
}

/// The entry's decision, with the other pods of its workload when it is to be evicted.
fn settle(entry: &mut PlanEntry, decision: Decision, checker: &Checker<'_>) {
    entry.siblings = match decision {
        Decision::Skip(_) => Arc::default(),
        _ => {
            let siblings = entry.workload.as_ref().and_then(|workload| checker.workloads.get(workload)).into_iter().flatten();
            Arc::new(siblings.map(|(uid, _)| uid.clone()).collect())
        }
    };
    entry.decision = decision;
}

/// The planned moves that would not settle, by uid, with why: each strategy that planned a move is asked again on
/// `whatif` after every move, with each moved pod in the form of its replacement ([`as_replacement`]); a moved
/// pod proposed again would be moved again, so the move does not better what the strategy measures. A strategy
/// that fails this call leaves its moves as checked. Instances made for the call are dropped after it, as in
/// [`propose`], unless strategies stay warm or the scheduler uses the policy too.
fn unsettled(
    policies: &[Arc<LoadedPolicy>],
    keep_warm: bool,
    plans: &Plans,
    entries: &[PlanEntry],
    whatif: &mut ClusterState,
    context: &EvictContext,
) -> HashMap<String, String> {
    let moved: Vec<&PlanEntry> = entries.iter().filter(|entry| entry.target().is_some()).collect();
    for entry in &moved {
        let (Some((pod, node)), Some(meta)) = (whatif.pod(&entry.uid), whatif.pod_meta(&entry.uid)) else { continue };
        let (replacement, node, meta) = (as_replacement(pod, context.now), node.to_string(), meta.clone());
        whatif.upsert_pod_with(replacement, &node, meta);
    }
    let moved_uids: HashSet<&str> = moved.iter().map(|entry| entry.uid.as_str()).collect();
    let scheduling = plans.scheduling_policies();
    let whatif = &*whatif;
    let asked: Vec<&Arc<LoadedPolicy>> = policies.iter().filter(|policy| moved.iter().any(|entry| entry.policy == policy.name())).collect();
    // On every core at once, one strategy per task, as `propose` asks them.
    let answers: Vec<(&str, Result<Vec<Eviction>, CallError>)> = asked
        .par_iter()
        .with_max_len(1)
        .map(|policy| {
            let answer = policy.prepare(whatif).and_then(|prepared| prepared.propose(whatif, context));
            if !keep_warm && !scheduling.iter().any(|other| other.name() == policy.name()) {
                policy.release_idle();
            }
            (policy.name(), answer)
        })
        .collect();
    let mut again = HashMap::new();
    for (policy, answer) in answers {
        let proposals = match answer {
            Ok(proposals) => proposals,
            Err(error) => {
                tracing::warn!(%policy, %error, "could not ask the strategy again after the plan's moves; its moves stand as checked");
                continue;
            }
        };
        for eviction in proposals {
            let Some((pod, node)) = whatif.pod_by_id(eviction.pod).filter(|(pod, _)| moved_uids.contains(pod.uid.as_str())) else { continue };
            again.entry(pod.uid.clone()).or_insert_with(|| {
                format!("{policy} would propose its replacement again on node {node} ({}), so the move does not settle it", eviction.reason)
            });
        }
    }
    again
}

/// A moved pod as its replacement would be on its new node: just created, running and ready, its containers
/// running and never restarted.
/// Asked about the pod itself, a strategy would see its age and restarts, which its replacement does not have.
fn as_replacement(pod: &Pod, now: i64) -> Pod {
    let mut replacement = pod.clone();
    replacement.created_at = now;
    replacement.phase = crate::contract::types::PodPhase::Running;
    replacement.ready = true;
    replacement.terminating = false;
    replacement.status_reason = String::new();
    replacement.nominated_node = None;
    for container in replacement.containers.iter_mut() {
        (container.restart_count, container.state) = (0, ContainerState::Running);
    }
    for container in replacement.init_containers.iter_mut() {
        container.restart_count = 0;
    }
    replacement
}

/// The envelope, limits, budgets and fit check over one plan's candidates.
struct Checker<'a> {
    section: &'a ReschedulerSection,
    plans: &'a Plans,
    memory: &'a Memory,
    envelope: Envelope,
    workloads: HashMap<Workload, Vec<(String, bool)>>,
    /// Pending pods policies may make room for, by uid.
    pending: HashMap<String, Pod>,
    budgets: Budgets,
    counts: Counts,
    /// Each workload's pacing verdict, once judged.
    workload_verdicts: HashMap<Workload, Option<Skip>>,
    /// Pending pods given room in this plan, by uid: the node.
    rooms: HashMap<String, String>,
    /// The gang each waiting member belongs to.
    gangs: gangs::GangIndex<'a>,
    now: Instant,
    wall: i64,
    volumes: &'a crate::cluster::volumes::VolumeObjects,
}

impl Checker<'_> {
    /// Why the pod may not be evicted at all (protections, memory, limits, budgets), before any fit check.
    /// Without `paced` (a preemption's victims, chosen by the priorities their owners set), the workload's own
    /// pacing, backoff and `maxPerWorkload` do not apply: they pace the moving of a workload, and would keep a
    /// pod from ever getting room that two replicas of one workload must make.
    fn held(&mut self, entry: &PlanEntry, pod: &Pod, meta: &PodMeta, paced: bool) -> Option<Skip> {
        if let Some(reason) = self.envelope.protection(pod, meta, self.wall) {
            return Some(Skip::Protected(reason));
        }
        if let Some(reason) = self.memory.refused_recently(&entry.uid, self.now) {
            return Some(Skip::Budget(reason));
        }
        let workload = entry.workload.as_ref().filter(|_| paced);
        if let Some(reason) = workload.and_then(|workload| self.memory.backing_off(workload, &entry.uid, &self.section.pacing, self.now)) {
            return Some(Skip::Backoff(reason));
        }
        if let Some(skip) = workload.and_then(|workload| self.workload_held(workload)) {
            return Some(skip);
        }
        if let Some(limit) = self.counts.limit_reached(self.section, &entry.node, &entry.namespace, workload) {
            return Some(limit);
        }
        self.budgets.refusal(pod).map(Skip::Budget)
    }

    /// Pacing of a workload: the memory does not change during a plan, so each workload is judged once, however
    /// many of its pods are candidates.
    fn workload_held(&mut self, workload: &Workload) -> Option<Skip> {
        if let Some(verdict) = self.workload_verdicts.get(workload) {
            return verdict.clone();
        }
        let ready: Vec<&str> = self.workloads.get(workload).into_iter().flatten().filter(|(_, ready)| *ready).map(|(uid, _)| uid.as_str()).collect();
        let verdict = self.memory.awaiting_replacement(workload, &ready, &self.section.pacing, self.now).map(Skip::Pacing);
        self.workload_verdicts.insert(workload.clone(), verdict.clone());
        verdict
    }

    /// The run's total is reached: nothing more is planned, and no candidate needs a closer look.
    fn run_full(&self) -> Option<Skip> {
        let limit = self.section.limits.max_per_run.filter(|limit| self.counts.total >= *limit)?;
        Some(Skip::Limit(format!("maxPerRun {limit} reached")))
    }

    fn profile_for(&self, pod: &Pod) -> Option<&Arc<ProfilePolicies>> {
        let name = if self.plans.scheduling.contains_key(&pod.scheduler_name) { Some(&pod.scheduler_name) } else { self.section.fit_profile.as_ref() };
        name.and_then(|name| self.plans.scheduling.get(name))
    }

    /// A failed pod to clear away: the protections, the backoff after refusals and the limits hold; PDBs do not
    /// count failed pods (the Eviction API lets them go), and there is nothing to place or pace.
    fn clearing(&mut self, entry: &PlanEntry, whatif: &ClusterState) -> Decision {
        if let Some(full) = self.run_full() {
            return Decision::Skip(full);
        }
        let Some((failed, meta)) = whatif.failed_pod(&entry.uid) else {
            return Decision::Skip(Skip::NoFit("the pod is gone".into()));
        };
        if let Some(reason) = self.envelope.protection(&failed.pod, meta, self.wall) {
            return Decision::Skip(Skip::Protected(reason));
        }
        if let Some(reason) = self.memory.refused_recently(&entry.uid, self.now) {
            return Decision::Skip(Skip::Budget(reason));
        }
        if let Some(limit) = self.counts.limit_reached(self.section, &entry.node, &entry.namespace, None) {
            return Decision::Skip(limit);
        }
        self.counts.add(&entry.node, &entry.namespace, None);
        Decision::Clear
    }

    /// A pod to move: it must land on another node, where its own profile places it (or the policy's required
    /// node, if it fits there).
    fn moving(&mut self, entry: &PlanEntry, whatif: &mut ClusterState) -> Decision {
        if let Some(full) = self.run_full() {
            return Decision::Skip(full);
        }
        let (Some((pod, _)), Some(meta)) = (whatif.pod(&entry.uid), whatif.pod_meta(&entry.uid)) else {
            return Decision::Skip(Skip::NoFit("the pod is gone".into()));
        };
        let (pod, meta) = (pod.clone(), meta.clone());
        if let Some(skip) = self.held(entry, &pod, &meta, true) {
            return Decision::Skip(skip);
        }
        // Where its volumes let it go, as the scheduler will see it.
        let pod = match self.volumes.resolved(&pod) {
            Ok(resolved) => resolved.unwrap_or(pod),
            Err(reason) => return Decision::Skip(Skip::NoFit(format!("its volumes fit no node: {reason}"))),
        };
        let Some(profile) = self.profile_for(&pod).cloned() else {
            return Decision::Skip(Skip::NoFit(format!(
                "scheduler {:?} is not a wasp profile, so nothing can check where it would land (set rescheduler.fitProfile)",
                pod.scheduler_name
            )));
        };
        whatif.remove_pod(&pod.uid);
        let target = match &entry.placement {
            Some(Placement::RequiredNode(node)) => {
                let fits = whatif.node_id(node).filter(|_| *node != entry.node).map(|id| fits_on(&profile, whatif, &pod, id));
                match fits {
                    Some(Ok(())) => Ok(node.clone()),
                    Some(Err(rejections)) => {
                        Err(format!("the policy's required node {node} does not fit it: {}", unschedulable_message(1, &rejections.reasons)))
                    }
                    None => Err(format!("the policy's required node {node} is its own node or gone")),
                }
            }
            _ => {
                let (feasible, rejections) = feasible_nodes(&profile, whatif, &pod, &[entry.node.as_str()]);
                let preferred = match &entry.placement {
                    Some(Placement::PreferredNode(node)) => whatif.node_id(node).filter(|id| feasible.contains(id)),
                    _ => None,
                };
                let chosen = match preferred {
                    // The hint steers the scheduler there: where the profile alone would go does not matter.
                    Some(id) => Ok(Some(id)),
                    None => self.elsewhere(&profile, whatif, &pod, &entry.node, &feasible),
                };
                chosen.and_then(|chosen| {
                    chosen.and_then(|id| whatif.node_name(id)).map(str::to_string).ok_or_else(|| {
                        let others = whatif.node_ids().len().saturating_sub(1);
                        format!("no other node fits it: {}", unschedulable_message(others, &rejections.reasons))
                    })
                })
            }
        };
        match target {
            Ok(target) => {
                self.budgets.spend(&pod);
                self.counts.add(&entry.node, &entry.namespace, entry.workload.as_ref());
                // The replacement takes room on its node: later candidates must fit around it.
                whatif.upsert_pod_with(pod, &target, meta);
                Decision::Evict { target }
            }
            Err(reason) => {
                whatif.upsert_pod_with(pod, &entry.node, meta);
                Decision::Skip(Skip::NoFit(reason))
            }
        }
    }

    /// Where the scheduler would put the replacement of `pod` (taken off `node` in `whatif`) among the `feasible`
    /// other nodes; Err when its profile would put it back on `node`, which still fits it and scores strictly
    /// higher than all of them: the eviction would change nothing (a bin-packing profile packs a duplicate back
    /// where `remove-duplicates` took it from, and the churn goes on until the workload's limit stops it).
    fn elsewhere(&self, profile: &ProfilePolicies, whatif: &ClusterState, pod: &Pod, node: &str, feasible: &[NodeId]) -> Result<Option<NodeId>, String> {
        let current = whatif.node_id(node).filter(|id| !feasible.is_empty() && fits_on(profile, whatif, pod, *id).is_ok());
        let Some(current) = current else { return Ok(best_node(profile, whatif, pod, feasible)) };
        let mut candidates = feasible.to_vec();
        candidates.push(current);
        let totals = score_totals(profile, whatif, pod, &candidates);
        let (back, best_other) = (totals[feasible.len()], totals[..feasible.len()].iter().copied().max().unwrap_or(0));
        if back > best_other {
            return Err(format!(
                "its profile {} would place the replacement back on node {node} (score {back}, the best other node {best_other}), so the move changes nothing",
                pod.scheduler_name
            ));
        }
        Ok(Some(feasible[best_index(&totals, feasible.len())]))
    }

    /// Pods evicted together to make room for the pending pod `uid` on their node, as preemption does: all or
    /// none. They must rank below the pending pod, pass the envelope, and together let it fit there; a pod
    /// already given room elsewhere in this plan needs none. With the room made, what it changed in `whatif`.
    fn making_room(&mut self, uid: &str, victims: &[&PlanEntry], whatif: &mut ClusterState) -> (Vec<Decision>, Option<gangs::MadeRoom>) {
        let all = |skip: Skip| (victims.iter().map(|_| Decision::Skip(skip.clone())).collect::<Vec<_>>(), None);
        if let Some(full) = self.run_full() {
            return all(full);
        }
        let Some(beneficiary) = self.pending.get(uid).cloned() else {
            return all(Skip::Preemption(format!("pending pod {uid} no longer waits")));
        };
        let who = format!("{}/{}", beneficiary.namespace, beneficiary.name);
        let node = victims[0].node.clone();
        if let Some(made) = self.rooms.get(uid) {
            return all(Skip::Preemption(format!("room for {who} is made on node {made} instead")));
        }
        let Some(profile) = self.profile_for(&beneficiary).cloned() else {
            return all(Skip::Preemption(format!("{who} is not a pod of a wasp profile")));
        };
        let (budgets, counts) = (self.budgets.clone(), self.counts.clone());
        let mut removed = Vec::new();
        let mut refusal = None;
        for victim in victims {
            let (Some((pod, _)), Some(meta)) = (whatif.pod(&victim.uid), whatif.pod_meta(&victim.uid)) else {
                refusal = Some((victim.key(), Skip::NoFit("the pod is gone".into())));
                break;
            };
            let (pod, meta) = (pod.clone(), meta.clone());
            let held = self.held(victim, &pod, &meta, false).or_else(|| {
                (pod.priority >= beneficiary.priority)
                    .then(|| Skip::Preemption(format!("its priority {} is not below the priority {} of {who}", pod.priority, beneficiary.priority)))
            });
            if let Some(skip) = held {
                refusal = Some((victim.key(), skip));
                break;
            }
            self.budgets.spend(&pod);
            self.counts.add(&victim.node, &victim.namespace, victim.workload.as_ref());
            whatif.remove_pod(&pod.uid);
            removed.push((pod, meta));
        }
        let fit = match (&refusal, whatif.node_id(&node)) {
            (None, Some(id)) => fits_on(&profile, whatif, &beneficiary, id).map_err(|rejections| unschedulable_message(1, &rejections.reasons)),
            (None, None) => Err(format!("node {node} is gone")),
            (Some(_), _) => Err(String::new()),
        };
        if let (None, Ok(())) = (&refusal, &fit) {
            // The pending pod takes the room it was given.
            whatif.upsert_pod(beneficiary, &node);
            self.rooms.insert(uid.to_string(), node.clone());
            let decisions = victims.iter().map(|_| Decision::Preempt { beneficiary: who.clone(), node: node.clone() }).collect();
            return (decisions, Some(gangs::MadeRoom { beneficiary: uid.to_string(), node, removed }));
        }
        for (pod, meta) in removed {
            whatif.upsert_pod_with(pod, &node, meta);
        }
        (self.budgets, self.counts) = (budgets, counts);
        let decisions = match (refusal, fit) {
            (Some((stays, skip)), _) => victims
                .iter()
                .map(|victim| {
                    if victim.key() == stays {
                        Decision::Skip(skip.clone())
                    } else {
                        Decision::Skip(Skip::Preemption(format!("{stays} must stay ({}), so evicting the others would not make room for {who}", skip.kind())))
                    }
                })
                .collect(),
            (None, Err(reason)) => all(Skip::NoFit(format!("even without these pods, {who} would not fit on node {node}: {reason}"))).0,
            (None, Ok(())) => unreachable!("handled above"),
        };
        (decisions, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str) -> Workload {
        Workload { namespace: "shop".into(), kind: "ReplicaSet".into(), name: name.into() }
    }

    #[test]
    fn each_limit_counts_its_own_scope() {
        let mut section = ReschedulerSection::with_strategies(Vec::new());
        section.limits = serde_yaml::from_str("{maxPerRun: 4, maxPerNode: 2, maxPerNamespace: 3, maxPerWorkload: 1}").unwrap();
        let mut counts = Counts::default();
        let (web, db) = (workload("web"), workload("db"));
        assert_eq!(counts.limit_reached(&section, "a", "shop", Some(&web)), None);
        counts.add("a", "shop", Some(&web));
        let again = counts.limit_reached(&section, "b", "shop", Some(&web)).unwrap();
        assert_eq!(again, Skip::WorkloadLimit("maxPerWorkload 1 reached for ReplicaSet shop/web".into()));
        assert!(again.waits_for_replacement(), "the next run comes soon for it");
        counts.add("a", "shop", Some(&db));
        assert_eq!(counts.limit_reached(&section, "a", "other", None), Some(Skip::Limit("maxPerNode 2 reached on node a".into())));
        counts.add("b", "shop", None);
        assert_eq!(counts.limit_reached(&section, "c", "shop", None), Some(Skip::Limit("maxPerNamespace 3 reached in namespace shop".into())));
        counts.add("c", "other", None);
        let run = counts.limit_reached(&section, "d", "third", None).unwrap();
        assert_eq!(run, Skip::Limit("maxPerRun 4 reached".into()));
        assert!(!run.waits_for_replacement());
    }

    fn entry(decision: Decision, outcome: Option<Outcome>) -> PlanEntry {
        PlanEntry {
            namespace: "shop".into(),
            name: "web-1".into(),
            uid: "u".into(),
            node: "a".into(),
            workload: Some(workload("web")),
            policy: "remove-duplicates".into(),
            reason: "a duplicate of web on node a".into(),
            decision,
            outcome,
            room_for: None,
            placement: None,
            siblings: Arc::default(),
        }
    }

    fn verdicts(record: &EvictionRecord) -> Vec<(&str, &str)> {
        record.checks.iter().map(|step| (step.check.as_str(), step.verdict.as_str())).collect()
    }

    #[test]
    fn an_eviction_record_names_the_check_that_decided_and_what_the_eviction_api_said() {
        let evicted = entry(Decision::Evict { target: "b".into() }, Some(Outcome::Evicted)).record("t");
        assert!(evicted.checks.iter().all(|step| step.verdict == "passed"));
        assert_eq!(
            (evicted.target.as_deref(), evicted.outcome.as_deref(), evicted.workload.as_deref()),
            (Some("b"), Some("evicted"), Some("ReplicaSet shop/web"))
        );

        let budget = entry(Decision::Skip(Skip::Budget("PodDisruptionBudget web allows no disruption".into())), None).record("t");
        assert_eq!(
            verdicts(&budget),
            [
                ("protection", "passed"),
                ("disruption budget", "refused"),
                ("backoff", "not reached"),
                ("pacing", "not reached"),
                ("limits", "not reached"),
                ("fit elsewhere", "not reached"),
                ("settles", "not reached")
            ]
        );
        assert_eq!(budget.checks[1].detail.as_deref(), Some("PodDisruptionBudget web allows no disruption"));
        assert_eq!((budget.decision.as_str(), budget.outcome.as_deref()), ("skip", None));

        let no_fit = entry(Decision::Skip(Skip::NoFit("no other node fits it".into())), None).record("t");
        assert_eq!(verdicts(&no_fit)[4..6], [("limits", "passed"), ("fit elsewhere", "refused")]);

        // maxPerRun is looked at first: nothing else was.
        let full = entry(Decision::Skip(Skip::Limit("maxPerRun 5 reached".into())), None).record("t");
        assert_eq!(verdicts(&full).iter().filter(|(_, verdict)| *verdict == "refused").count(), 1);
        assert_eq!(verdicts(&full)[0], ("protection", "not reached"));

        let refused = entry(Decision::Evict { target: "b".into() }, Some(Outcome::RefusedByBudget { retry: Duration::from_secs(20) })).record("t");
        assert_eq!(refused.outcome.as_deref(), Some("refused by a PodDisruptionBudget; tried again in 20s"));
    }
}
