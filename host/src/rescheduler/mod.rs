//! The rescheduler loop: evicts running pods so that the scheduler places them again, better. WASM evict
//! policies propose; the host decides, inside a safety envelope no policy can bypass.
//!
//! - [`plan`]: one run's plan (proposals, envelope, limits, budgets, fit check with the scheduler's policies).
//! - [`envelope`]: protections (the descheduler's `DefaultEvictor`, plus the `wasp.dev/evict` annotation).
//! - [`memory`]: across runs: pacing until replacements are Ready, backoff, PodDisruptionBudget retries.
//! - [`budgets`]: PodDisruptionBudgets spent by the plan, so a dry run shows what a budget would refuse.
//! - [`evictor`]: the Eviction API and events.
//! - [`metrics`]: the rescheduler's metric families.
//!
//! A run takes the policy registry's current generation once, plans on a what-if copy of the shared cluster,
//! then evicts (unless `dryRun`). Runs happen every `interval`, and sooner when a node changes in what policies
//! see (tainted, cordoned, relabelled), a pod of a wasp profile has waited longer than `pendingTrigger`, or the
//! last run held pods back only until a replacement is Ready (a drain goes on as fast as pacing allows).
//!
//! Preemption is a run of its own: when the scheduler cannot place a pod that may preempt, the
//! `rescheduler.preemption` policy alone is called for the waiting pods (within [`PREEMPTION_SETTLE`]), and its
//! victims go through the same plan, envelope and Eviction API as any eviction, so no budget is ever broken.

pub mod budgets;
pub mod envelope;
pub mod evictor;
pub mod memory;
pub mod metrics;
pub mod plan;

use crate::cluster::{ClusterEvent, SharedCluster};
use crate::contract::{EvictContext, PendingPod};
use crate::explain::DecisionRecords;
use crate::kube::{ApiClient, EventRecorder};
use crate::registry::PolicyRegistry;
use crate::serve::Heartbeat;
use evictor::{Answer, Evictor};
use memory::Memory;
use plan::{Decision, Outcome, Plan};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
// tokio's clock: pacing and backoff follow simulated time under `wasp simulate` (see `crate::clock`).
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

/// A burst of changes (a node drained label by label) makes one run: wait this long after the first.
const SETTLE: Duration = Duration::from_secs(1);
/// Runs that a change triggers start at least this long after the previous run ended.
const MIN_GAP: Duration = Duration::from_secs(5);
/// Pending pods a run tells its policies of, at most: those the scheduler could not place first, then the
/// highest priority, then the oldest (see [`SharedCluster::pending_with_reasons`]). Each policy
/// receives each of them whole, so a burst of 50k pods waiting for the scheduler would be 50k pod records in
/// every strategy's instance; a run evicts for a few pending pods at most anyway.
pub const PENDING_PER_RUN: usize = 1000;
/// How often pending pods are checked against `pendingTrigger`.
const PENDING_CHECK: Duration = Duration::from_secs(5);
/// A burst of unschedulable pods makes one preemption run: wait this long after the first.
const PREEMPTION_SETTLE: Duration = Duration::from_millis(100);
/// Preemption runs start at least this long after the previous one: a pod that cannot be helped fails again and
/// again as its backoff allows, and each failure asks.
const PREEMPTION_GAP: Duration = Duration::from_secs(1);

/// Which evict policies a run calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// The strategies, every `interval` or sooner after a change.
    Periodic,
    /// The preemption policy alone, for the pods that wait.
    Preemption,
}

/// Counters of what the host sent, whatever the API server answered.
#[derive(Default)]
pub struct Stats {
    pub runs: AtomicU64,
    pub eviction_requests: AtomicU64,
    pub evicted: AtomicU64,
}

/// The last run, as `/policies` and `wasp simulate` report it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub finished_at: String,
    pub dry_run: bool,
    pub candidates: usize,
    pub evicted: usize,
    /// Candidates left in place, by reason.
    pub skipped: BTreeMap<String, usize>,
    pub policies: Vec<StrategySummary>,
    pub duration_ms: u128,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StrategySummary {
    pub policy: String,
    pub proposed: usize,
    pub duration_ms: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub struct Rescheduler {
    policies: Arc<PolicyRegistry>,
    cluster: Arc<SharedCluster>,
    evictor: Evictor,
    metrics: metrics::ReschedulerMetrics,
    memory: Mutex<Memory>,
    last_run: Mutex<Option<RunSummary>>,
    pub stats: Stats,
    /// Busy while a run is under way (`/healthz`).
    pub heartbeat: Heartbeat,
    /// Whether the evictions kept in the API server were read into the memory (the first run does it).
    restored: std::sync::atomic::AtomicBool,
    /// The host's own namespace (`POD_NAMESPACE`), protected from evictions with kube-system.
    host_namespace: Option<String>,
    /// The last PodDisruptionBudgets listed, and when: a run whose list fails plans with them.
    last_budgets: Mutex<Option<(Instant, Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>)>>,
    /// Every candidate's last verdict, for `wasp explain eviction`.
    records: Arc<DecisionRecords>,
}

/// How old the last list of PodDisruptionBudgets may be for a run whose own list failed to plan with it.
const BUDGETS_KEPT_FOR: Duration = Duration::from_secs(300);

fn wall_seconds() -> i64 {
    crate::clock::now().as_second()
}

impl Rescheduler {
    pub fn new(
        policies: Arc<PolicyRegistry>,
        cluster: Arc<SharedCluster>,
        api: ApiClient,
        events: &EventRecorder,
        metrics: metrics::ReschedulerMetrics,
        host_namespace: Option<String>,
        records: Arc<DecisionRecords>,
    ) -> Arc<Rescheduler> {
        Arc::new(Rescheduler {
            policies,
            cluster,
            evictor: Evictor::new(api, events),
            metrics,
            memory: Mutex::new(Memory::default()),
            last_run: Mutex::new(None),
            stats: Stats::default(),
            heartbeat: Heartbeat::default(),
            restored: std::sync::atomic::AtomicBool::new(false),
            host_namespace,
            last_budgets: Mutex::new(None),
            records,
        })
    }

    /// The budgets a run plans with: listed now or, when the list fails, the last list of the past
    /// [`BUDGETS_KEPT_FOR`] (a run that counted none sent evictions the Eviction API then refused: a tenth of
    /// the refusals of the soak, where 2% of lists fail). With neither, the plan counts none and says so; the
    /// Eviction API still enforces them.
    async fn budgets(&self) -> (budgets::Budgets, Vec<String>) {
        let last_budgets = || self.last_budgets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let error = match self.evictor.budgets().await {
            Ok(objects) => {
                let planned = budgets::Budgets::from_objects(&objects);
                *last_budgets() = Some((Instant::now(), objects));
                return planned;
            }
            Err(error) => error,
        };
        let kept =
            last_budgets().as_ref().filter(|(listed, _)| listed.elapsed() < BUDGETS_KEPT_FOR).map(|(listed, objects)| (listed.elapsed(), objects.clone()));
        match kept {
            Some((age, objects)) => {
                let (planned, mut warnings) = budgets::Budgets::from_objects(&objects);
                warnings.push(format!("PodDisruptionBudgets could not be read ({error}); the plan counts them as listed {} s ago", age.as_secs()));
                (planned, warnings)
            }
            None => (
                budgets::Budgets::default(),
                vec![format!("PodDisruptionBudgets could not be read ({error}); the plan does not count them, the Eviction API still enforces them")],
            ),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn last_run(&self) -> Option<RunSummary> {
        self.last_run.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Plans with the current generation's strategies and, unless it is a dry run (`force_dry_run` or the
    /// configuration's `dryRun`), evicts. None when the configuration has no rescheduler section or no strategy.
    pub async fn run_once(&self, force_dry_run: bool) -> Option<Plan> {
        self.run_kind(RunKind::Periodic, force_dry_run, &CancellationToken::new()).await
    }

    /// Runs the preemption policy for the pods that wait. None when none is configured.
    pub async fn preempt_once(&self) -> Option<Plan> {
        self.run_kind(RunKind::Preemption, false, &CancellationToken::new()).await
    }

    /// One run; once `stop` is cancelled, the evictions not yet sent are not sent (the one in flight finishes).
    async fn run_kind(&self, kind: RunKind, force_dry_run: bool, stop: &CancellationToken) -> Option<Plan> {
        let generation = self.policies.current();
        let section = generation.config.rescheduler.as_ref()?;
        let policies: Vec<Arc<crate::policy::LoadedPolicy>> = match kind {
            RunKind::Periodic => generation.plans.eviction.clone(),
            RunKind::Preemption => generation.plans.preemption.iter().cloned().collect(),
        };
        if policies.is_empty() {
            return None;
        }
        for policy in &policies {
            self.metrics.strategy(policy.name());
        }
        let dry_run = force_dry_run || section.dry_run;
        let _busy = self.heartbeat.busy();
        let started = Instant::now();
        let (budgets, mut warnings) = self.budgets().await;
        let kept_in = generation.config.leader_election.lease_namespace.clone();
        if !self.restored.swap(true, Ordering::Relaxed) {
            match self.evictor.load_memory(&kept_in).await {
                Ok(Some(record)) => {
                    tracing::info!(workloads = record.len(), configmap = %format!("{kept_in}/{}", evictor::MEMORY_CONFIG_MAP), "restored the workloads' recent evictions");
                    self.memory().restore(&record, Instant::now(), wall_seconds());
                }
                Ok(None) => {}
                Err(error) => {
                    // Tried again next run; meanwhile the per-run limits still hold.
                    tracing::warn!(%error, "could not read the workloads' recent evictions");
                    self.restored.store(false, Ordering::Relaxed);
                }
            }
        }
        let memory = {
            let mut memory = self.memory();
            memory.prune(&section.pacing, Instant::now());
            memory.clone()
        };
        let pending: Vec<PendingPod> = self
            .cluster
            .pending_with_reasons(|pod| generation.plans.scheduling.contains_key(&pod.scheduler_name) && self.cluster.may_preempt(&pod.uid), PENDING_PER_RUN)
            .into_iter()
            .filter(|(pod, _)| self.may_take_room(pod))
            // Its claims as the scheduler resolves them; one no node can satisfy is not helped by room.
            .filter_map(|(pod, reason)| match self.cluster.volumes.resolved(&pod) {
                Ok(resolved) => Some(PendingPod { pod: resolved.unwrap_or(pod), reason }),
                Err(_) => None,
            })
            .collect();
        let failed = self.cluster.read().failed_pods();
        let gangs = plan::gangs::pending_gangs(&self.cluster, &pending);
        let context = EvictContext { now: wall_seconds(), pending, failed };
        // The host's own: where it runs (its POD_NAMESPACE) and where its Lease is (the install's namespace, also
        // for `wasp reschedule` run from outside).
        let host_namespaces: Vec<&str> =
            self.host_namespace.iter().map(String::as_str).chain([generation.config.leader_election.lease_namespace.as_str()]).collect();
        let inputs = plan::Inputs {
            section,
            plans: &generation.plans,
            memory: &memory,
            budgets,
            now: Instant::now(),
            wall: context.now,
            volumes: &self.cluster.volumes,
            host_namespaces: &host_namespaces,
            gangs: &gangs,
        };
        let mut plan = crate::runtime::off_async_worker(|| {
            let proposals = plan::propose(&policies, &generation.plans, self.cluster.read(), context, section.keep_strategies_warm);
            let plan = plan::plan(inputs, proposals);
            // The fit check makes instances of the scheduling policies when the scheduler holds theirs (a run
            // during a burst): each policy keeps what the scheduler calls at once.
            for policy in generation.plans.scheduling_policies() {
                policy.keep_at_most(crate::scheduler::cycle::threads_for(policy.as_ref()));
            }
            plan
        });
        plan.dry_run = dry_run;
        plan.warnings.append(&mut warnings);
        for warning in &plan.warnings {
            tracing::warn!(%warning, "rescheduling plan");
        }
        for (policy, took, _) in &plan.proposals {
            self.metrics.proposed(policy, *took);
        }
        // A strategy proposing the replacement of another strategy's eviction: said, whatever the plan decides.
        if !dry_run {
            let now = Instant::now();
            let conflicts: Vec<(usize, memory::Conflict)> = {
                let mut memory = self.memory();
                let proposals = plan.entries.iter().enumerate().filter(|(_, entry)| entry.decision != Decision::Clear);
                proposals
                    .filter_map(|(index, entry)| Some((index, memory.undoing(entry.workload.as_ref()?, &entry.uid, &entry.policy, &section.pacing, now)?)))
                    .collect()
            };
            for (index, conflict) in conflicts {
                let entry = &plan.entries[index];
                tracing::warn!(pod = %entry.key(), workload = %conflict.workload, evicted_by = %conflict.evicted_by, proposed_by = %conflict.proposed_by, "strategies undo each other's moves");
                self.metrics.conflict(&conflict.evicted_by, &conflict.proposed_by);
                self.evictor.strategies_conflict(entry, &conflict, section.pacing.window).await;
            }
        }
        // Pending pods whose room was made, by `namespace/name`: the node, its uid, and whether every eviction
        // for it went. The scheduler keeps the room for it from before the first eviction: a pod of lower priority
        // must not take it once the victims are gone, before the nomination reaches the API server.
        let mut rooms: BTreeMap<String, (String, String, bool)> = BTreeMap::new();
        if !dry_run {
            for entry in &plan.entries {
                if let (Decision::Preempt { node, .. }, Some(uid)) = (&entry.decision, &entry.room_for) {
                    self.cluster.nominate(uid, Some(node));
                }
            }
        }
        for entry in &mut plan.entries {
            let preempting = match &entry.decision {
                Decision::Skip(skip) => {
                    self.metrics.skipped(&entry.policy, skip.kind());
                    tracing::debug!(pod = %entry.key(), policy = %entry.policy, skipped = skip.kind(), detail = skip.detail(), "left in place");
                    if !dry_run {
                        self.evictor.left_in_place(entry, skip).await;
                    }
                    continue;
                }
                Decision::Evict { .. } | Decision::Clear => None,
                Decision::Preempt { beneficiary, node } => Some((beneficiary.clone(), node.clone())),
            };
            if !dry_run && stop.is_cancelled() {
                // Stopping: the evictions not yet sent are not sent, and a room they were part of is not made.
                tracing::info!(pod = %entry.key(), policy = %entry.policy, "stopping: eviction not sent");
                if let Some((beneficiary, node)) = preempting {
                    rooms.entry(beneficiary).or_insert((node, entry.room_for.clone().unwrap_or_default(), false)).2 = false;
                }
                continue;
            }
            let outcome = if dry_run { Outcome::NotSent } else { self.evict(entry, section.pacing.budget_retry, preempting.is_some()).await };
            if let Some((beneficiary, node)) = preempting {
                let uid = entry.room_for.clone().unwrap_or_default();
                let room = rooms.entry(beneficiary).or_insert((node, uid, true));
                room.2 &= outcome == Outcome::Evicted;
            }
            self.metrics.eviction(&entry.policy, outcome.label());
            entry.outcome = Some(outcome);
        }
        let at = crate::explain::now();
        for entry in &plan.entries {
            self.records.evictions.put(&entry.key(), &entry.uid, entry.record(&at));
        }
        if plan.entries.iter().any(|entry| entry.outcome == Some(Outcome::Evicted) && entry.decision != Decision::Clear) {
            let record = self.memory().to_record(Instant::now(), wall_seconds());
            self.evictor.save_memory(&kept_in, &record).await;
        }
        // What keeps a node that a policy empties (it proposed every pod there: a drain) from being emptied, said
        // on the node, once per node and policy.
        if !dry_run && kind == RunKind::Periodic {
            let mut proposed: BTreeMap<(String, String), usize> = BTreeMap::new();
            let mut blocked: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
            for entry in &plan.entries {
                *proposed.entry((entry.node.clone(), entry.policy.clone())).or_default() += 1;
                if let Decision::Skip(skip) = &entry.decision {
                    if skip.blocks_node() {
                        blocked.entry((entry.node.clone(), entry.policy.clone())).or_default().push((entry.key(), skip.detail().to_string()));
                    }
                }
            }
            let emptied: Vec<((String, String), Vec<(String, String)>)> = {
                let cluster = self.cluster.read();
                // At least every pod there now (the evicted ones may be gone already).
                blocked.into_iter().filter(|(key, _)| proposed.get(key).copied().unwrap_or(0) >= cluster.pods_on(&key.0).count()).collect()
            };
            for ((node, policy), pods) in emptied {
                self.evictor.blocked_on_node(&node, &policy, &pods).await;
            }
        }
        for (beneficiary, (node, uid, made)) in rooms {
            if !made {
                self.cluster.nominate(&uid, None);
                continue;
            }
            let Some((namespace, name)) = beneficiary.split_once('/') else { continue };
            match self.evictor.nominate(namespace, name, &node).await {
                Ok(()) => tracing::info!(pod = %beneficiary, %node, "room made; nominated the node for it"),
                Err(error) => tracing::warn!(pod = %beneficiary, %node, %error, "could not nominate the node"),
            }
        }
        let took = started.elapsed();
        let summary = summarize(&plan, took);
        self.metrics.ran(took, plan.evictions().count());
        self.stats.runs.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            generation = generation.number,
            ?kind,
            candidates = summary.candidates,
            evicted = summary.evicted,
            skipped = ?summary.skipped,
            dry_run,
            took_ms = took.as_millis() as u64,
            "rescheduling run"
        );
        *self.last_run.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(summary);
        Some(plan)
    }

    /// Sends one eviction and remembers what it means: pacing and backoff for the workload, a retry delay
    /// after a budget's refusal, the policy's placement hint for the replacement.
    async fn evict(&self, entry: &plan::PlanEntry, budget_retry: Duration, preempting: bool) -> Outcome {
        self.stats.eviction_requests.fetch_add(1, Ordering::Relaxed);
        // The hint goes in before the request: the controller may create the replacement, and the scheduler
        // bind it, before the eviction's answer arrives here.
        let hint = entry.workload.as_ref().zip(entry.placement.as_ref());
        if let Some((workload, placement)) = hint {
            self.cluster.hints.add(workload.clone(), placement.clone());
        }
        let answer = self.evictor.evict(entry).await;
        if let (Some((workload, placement)), false) = (hint, matches!(answer, Answer::Evicted)) {
            self.cluster.hints.withdraw(workload, placement);
        }
        match answer {
            Answer::Evicted => {
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                // Clearing a failed pod disrupts nothing: its workload is neither paced nor backed off for it.
                if entry.decision != Decision::Clear {
                    self.memory().record_eviction(entry.workload.as_ref(), entry.siblings.clone(), &entry.policy, Instant::now());
                }
                tracing::info!(pod = %entry.key(), node = %entry.node, policy = %entry.policy, reason = %entry.reason, decision = ?entry.decision, "evicted");
                if preempting {
                    self.evictor.preempted(entry).await;
                } else {
                    self.evictor.evicted(entry, entry.target()).await;
                }
                Outcome::Evicted
            }
            Answer::RefusedByBudget(message) => {
                let retry = self.memory().record_refusal(&entry.uid, budget_retry, Instant::now());
                tracing::info!(pod = %entry.key(), policy = %entry.policy, %message, retry = %humantime::format_duration(retry), "a PodDisruptionBudget refused the eviction");
                Outcome::RefusedByBudget { retry }
            }
            Answer::Gone => Outcome::Gone,
            Answer::Failed(error) => {
                tracing::warn!(pod = %entry.key(), policy = %entry.policy, %error, "eviction failed");
                Outcome::Failed(error)
            }
        }
    }

    /// Runs every `interval`, and sooner after a relevant change, while the task lives and `stop` is not
    /// cancelled; preemption runs in between, when the scheduler asks.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut events = self.cluster.subscribe();
        tokio::select! {
            _ = self.cluster.wait_until_ready() => {}
            _ = stop.cancelled() => return,
        }
        let mut pending_seen = HashSet::new();
        let mut last_preemption: Option<tokio::time::Instant> = None;
        let mut preempt_at: Option<tokio::time::Instant> = None;
        loop {
            let configured = self.policies.current().config.rescheduler.as_ref().map(|section| section.interval);
            if stop.is_cancelled() {
                return;
            }
            let interval = match (self.run_kind(RunKind::Periodic, false, &stop).await, configured) {
                // Pods held back only until a replacement is Ready: look again soon, not a whole interval later.
                (Some(plan), Some(interval))
                    if plan.entries.iter().any(|entry| matches!(&entry.decision, Decision::Skip(skip) if skip.waits_for_replacement())) =>
                {
                    interval.min(MIN_GAP)
                }
                (_, Some(interval)) => interval,
                // No rescheduler in the configuration (a reload removed it): look again later.
                _ => Duration::from_secs(30),
            };
            let ended = tokio::time::Instant::now();
            let mut due = ended + interval;
            loop {
                let now = tokio::time::Instant::now();
                if now >= due {
                    break;
                }
                if preempt_at.is_some_and(|at| now >= at) {
                    preempt_at = None;
                    self.run_kind(RunKind::Preemption, false, &stop).await;
                    last_preemption = Some(tokio::time::Instant::now());
                    continue;
                }
                let preempts = self.policies.current().plans.preemption.is_some();
                let trigger = (now + SETTLE).max(ended + MIN_GAP);
                let preemption_trigger = (now + PREEMPTION_SETTLE).max(last_preemption.map_or(now, |last| last + PREEMPTION_GAP));
                let wake = due.min(now + PENDING_CHECK).min(preempt_at.unwrap_or(due));
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(wake) => {
                        if self.pods_waiting_too_long(&mut pending_seen) {
                            // With a preemption policy, a pod waiting too long gets a preemption run, not every strategy.
                            if preempts {
                                preempt_at = Some(preempt_at.unwrap_or(preemption_trigger).min(preemption_trigger));
                            } else {
                                due = due.min(trigger);
                            }
                        }
                    }
                    event = events.recv() => match event {
                        Ok(ClusterEvent::NodeChanged { name }) => {
                            tracing::debug!(node = %name, "node changed; rescheduling soon");
                            due = due.min(trigger);
                        }
                        Ok(ClusterEvent::PreemptionWanted { uid }) if preempts => {
                            tracing::debug!(%uid, "the scheduler found no room; preemption soon");
                            preempt_at.get_or_insert(preemption_trigger);
                        }
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        }
    }

    /// Whether a pending pod may take room from others: not with `preemptionPolicy: Never`, and not while pods
    /// of lower priority still leave the node nominated for it (they are its room, being freed: kube-scheduler's
    /// rule, which keeps a slow termination from costing more victims elsewhere).
    fn may_take_room(&self, pod: &crate::contract::types::Pod) -> bool {
        if !self.cluster.may_preempt(&pod.uid) {
            return false;
        }
        let Some(node) = &pod.nominated_node else { return true };
        !self.cluster.read().pods_on(node).any(|other| other.terminating && other.priority < pod.priority)
    }

    /// Whether a pod of a wasp profile that the scheduler could not place newly waits longer than `pendingTrigger`
    /// (each pod triggers once); pods merely queued behind a burst trigger nothing.
    fn pods_waiting_too_long(&self, seen: &mut HashSet<String>) -> bool {
        let generation = self.policies.current();
        let Some(section) = &generation.config.rescheduler else { return false };
        let now = wall_seconds();
        let waiting = self.cluster.unplaced_uids_where(|pod| {
            generation.plans.scheduling.contains_key(&pod.scheduler_name) && now.saturating_sub(pod.created_at) >= section.pending_trigger.as_secs() as i64
        });
        let fresh = waiting.iter().any(|uid| !seen.contains(uid));
        // Forget pods that no longer wait, so the set stays as small as the pending pods.
        *seen = waiting.into_iter().collect();
        fresh
    }
}

fn summarize(plan: &Plan, took: Duration) -> RunSummary {
    let mut skipped = BTreeMap::new();
    for entry in &plan.entries {
        if let Decision::Skip(skip) = &entry.decision {
            *skipped.entry(skip.kind().to_string()).or_default() += 1;
        }
    }
    let policies = plan
        .proposals
        .iter()
        .map(|(policy, took, proposed)| StrategySummary {
            policy: policy.clone(),
            proposed: *proposed,
            duration_ms: took.as_millis(),
            error: plan.failures.iter().find(|failure| &failure.policy == policy).map(|failure| failure.error.clone()),
        })
        .collect();
    RunSummary {
        finished_at: crate::clock::now_rfc3339(),
        dry_run: plan.dry_run,
        candidates: plan.entries.len(),
        evicted: plan.entries.iter().filter(|entry| entry.outcome == Some(Outcome::Evicted)).count(),
        skipped,
        policies,
        duration_ms: took.as_millis(),
    }
}
