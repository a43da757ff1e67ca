//! What the rescheduler remembers across runs, so that no policy can make it loop: each workload's recent
//! evictions (pacing until the replacement is Ready, replacements left alone after too many within a window) and pods whose
//! eviction a PodDisruptionBudget refused (retried later with a doubling delay, never in a loop).
//!
//! The workloads' evictions are also kept in the API server ([`Record`], written by the rescheduler after a run
//! that evicted, read by the next leader's first run), so a restart or a failover keeps the promise that a
//! workload's replacements are not moved again once it lost `maxEvictionsPerWorkload` pods within the window, and
//! the pacing; budget refusals, which only slow retries, stay in the process.

pub use crate::cluster::Workload;
use crate::config::Pacing;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
// tokio's clock: pacing and backoff follow simulated time under `wasp simulate` (see `crate::clock`).
use tokio::time::Instant;

/// One eviction of a workload: when, by which policy (empty when restored from a [`Record`]), and the workload's
/// pods at that moment (a pod not among them is a replacement; creation times, in whole seconds, cannot tell a
/// replacement from a pod created the same second).
#[derive(Debug, Clone)]
struct Evicted {
    at: Instant,
    policy: Arc<str>,
    known: Arc<HashSet<String>>,
}

#[derive(Debug, Clone, Copy)]
struct Refused {
    times: u32,
    until: Instant,
    wait: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct Memory {
    evictions: HashMap<Workload, Vec<Evicted>>,
    refused: HashMap<String, Refused>,
    /// Strategies seen undoing each other's moves, by (workload, evicted by, proposed by), with when last said:
    /// said once per window.
    conflicts_said: HashMap<(Workload, Arc<str>, String), Instant>,
}

/// A strategy proposes a pod that replaced one another strategy evicted within the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub workload: Workload,
    pub evicted_by: String,
    pub proposed_by: String,
}

/// The workloads' evictions as kept in the API server: by `namespace/kind/name`, the Unix seconds of each
/// eviction, the workload's pods at the last one (what pacing compares the Ready pods with) and at the first
/// (what tells its original pods from its replacements).
pub type Record = std::collections::BTreeMap<String, WorkloadRecord>;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkloadRecord {
    pub evicted_at: Vec<i64>,
    pub known: Vec<String>,
    /// Absent in records written before it existed: every pod then counts as a replacement.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "firstKnown")]
    pub first_known: Vec<String>,
}

/// A refused pod waits `base * 2^(times-1)`, at most this many times `base`.
const MAX_RETRY_FACTOR: u32 = 16;

impl Memory {
    /// The workload lost a pod to `policy`; `known` are the uids of its pods when it did.
    pub fn record_eviction(&mut self, workload: Option<&Workload>, known: Arc<HashSet<String>>, policy: &str, now: Instant) {
        if let Some(workload) = workload {
            self.evictions.entry(workload.clone()).or_default().push(Evicted { at: now, policy: Arc::from(policy), known });
        }
    }

    /// Whether `policy` proposing the pod `uid` of `workload` undoes another strategy's move: the pod replaced
    /// one that another policy evicted within the window (a pair such as low- and high-node-utilization with
    /// thresholds that disagree evicts in a loop that only pacing slows). Said once per window and pair.
    pub fn undoing(&mut self, workload: &Workload, uid: &str, policy: &str, pacing: &Pacing, now: Instant) -> Option<Conflict> {
        let evicted = self.evictions.get(workload)?.iter().filter(|evicted| now.saturating_duration_since(evicted.at) < pacing.window);
        let undone = evicted
            .filter(|evicted| !evicted.policy.is_empty() && &*evicted.policy != policy && !evicted.known.contains(uid))
            .max_by_key(|evicted| evicted.at)?;
        let key = (workload.clone(), undone.policy.clone(), policy.to_string());
        if self.conflicts_said.get(&key).is_some_and(|said| now.saturating_duration_since(*said) < pacing.window) {
            return None;
        }
        self.conflicts_said.insert(key, now);
        Some(Conflict { workload: workload.clone(), evicted_by: undone.policy.to_string(), proposed_by: policy.to_string() })
    }

    /// A PodDisruptionBudget refused evicting the pod with `uid`; returns how long it now waits.
    pub fn record_refusal(&mut self, uid: &str, base: Duration, now: Instant) -> Duration {
        let entry = self.refused.entry(uid.to_string()).or_insert(Refused { times: 0, until: now, wait: base });
        entry.times += 1;
        let factor = 1u32.checked_shl(entry.times - 1).unwrap_or(u32::MAX).min(MAX_RETRY_FACTOR);
        entry.wait = base * factor;
        entry.until = now + entry.wait;
        entry.wait
    }

    /// Forgets what no longer matters: evictions older than both the window and the pacing timeout, and
    /// refusals whose wait is over for longer than the longest wait.
    pub fn prune(&mut self, pacing: &Pacing, now: Instant) {
        let keep = pacing.window.max(pacing.replacement_timeout);
        self.evictions.retain(|_, list| {
            list.retain(|evicted| now.saturating_duration_since(evicted.at) < keep);
            !list.is_empty()
        });
        self.conflicts_said.retain(|_, said| now.saturating_duration_since(*said) < pacing.window);
        let forget_after = pacing.budget_retry * MAX_RETRY_FACTOR;
        self.refused.retain(|_, refused| now.saturating_duration_since(refused.until) < forget_after);
    }

    /// The evictions as a [`Record`], at `now` (this process's clock) and `wall` (Unix seconds).
    pub fn to_record(&self, now: Instant, wall: i64) -> Record {
        let mut record = Record::new();
        for (workload, evictions) in &self.evictions {
            let seconds_ago = |evicted: &Evicted| now.saturating_duration_since(evicted.at).as_secs() as i64;
            let sorted = |known: &HashSet<String>| {
                let mut known: Vec<String> = known.iter().cloned().collect();
                known.sort();
                known
            };
            let mut entry = WorkloadRecord { evicted_at: evictions.iter().map(|evicted| wall - seconds_ago(evicted)).collect(), ..WorkloadRecord::default() };
            if let Some(last) = evictions.iter().max_by_key(|evicted| evicted.at) {
                entry.known = sorted(&last.known);
            }
            if let Some(first) = evictions.iter().min_by_key(|evicted| evicted.at).filter(|_| evictions.len() > 1) {
                entry.first_known = sorted(&first.known);
            }
            record.insert(format!("{}/{}/{}", workload.namespace, workload.kind, workload.name), entry);
        }
        record
    }

    /// Takes in the evictions of a [`Record`] (written before a restart, or by another leader) for the workloads
    /// this memory has none of.
    pub fn restore(&mut self, record: &Record, now: Instant, wall: i64) {
        for (key, entry) in record {
            let mut parts = key.splitn(3, '/');
            let (Some(namespace), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let workload = Workload { namespace: namespace.into(), kind: kind.into(), name: name.into() };
            if self.evictions.contains_key(&workload) {
                continue;
            }
            let (first, last) = (entry.evicted_at.iter().min().copied(), entry.evicted_at.iter().max().copied());
            let known = Arc::new(entry.known.iter().cloned().collect::<HashSet<String>>());
            let first_known = Arc::new(entry.first_known.iter().cloned().collect::<HashSet<String>>());
            let restored = entry.evicted_at.iter().map(|seconds| Evicted {
                at: now.checked_sub(Duration::from_secs((wall - seconds).max(0) as u64)).unwrap_or(now),
                policy: Arc::from(""),
                // The pods known at the last eviction (pacing) and at the first (backoff); others only count
                // towards the window.
                known: if Some(*seconds) == last {
                    known.clone()
                } else if Some(*seconds) == first {
                    first_known.clone()
                } else {
                    Arc::new(HashSet::new())
                },
            });
            self.evictions.insert(workload, restored.collect());
        }
    }

    /// Why the pod must wait for a PodDisruptionBudget retry, if it must.
    pub fn refused_recently(&self, uid: &str, now: Instant) -> Option<String> {
        let refused = self.refused.get(uid).filter(|refused| refused.until > now)?;
        // Stable between refusals, so the event users see is counted up, not repeated with a countdown.
        Some(format!("a PodDisruptionBudget refused its eviction {} time(s); the next try waits {}", refused.times, humantime::format_duration(refused.wait)))
    }

    /// Why the pod with `uid` backs off: its workload lost `maxEvictionsPerWorkload` pods within the window, and
    /// this pod is a replacement (not among the workload's pods at the window's first eviction). The workload's
    /// original pods may still go, one at a time after each replacement is Ready, so a drain or a rebalance
    /// finishes; moving the pods it just moved again (a loop, whatever a policy proposes) stops. After a restart
    /// the first and the last eviction's pods are known (see [`WorkloadRecord`]).
    pub fn backing_off(&self, workload: &Workload, uid: &str, pacing: &Pacing, now: Instant) -> Option<String> {
        let recent: Vec<&Evicted> = self.evictions.get(workload)?.iter().filter(|evicted| now.saturating_duration_since(evicted.at) < pacing.window).collect();
        let first = recent.iter().min_by_key(|evicted| evicted.at)?;
        (recent.len() as u32 >= pacing.max_evictions_per_workload && !first.known.contains(uid)).then(|| {
            format!(
                "{workload} lost {} pods within {} and this one replaced one of them; it backs off",
                recent.len(),
                humantime::format_duration(pacing.window)
            )
        })
    }

    /// Why the workload waits: its last eviction is recent and none of its Ready pods (`ready`, by uid) is new
    /// since.
    pub fn awaiting_replacement(&self, workload: &Workload, ready: &[&str], pacing: &Pacing, now: Instant) -> Option<String> {
        let last = self.evictions.get(workload)?.iter().max_by_key(|evicted| evicted.at)?;
        let since = now.saturating_duration_since(last.at);
        if since >= pacing.replacement_timeout || ready.iter().any(|uid| !last.known.contains(*uid)) {
            return None;
        }
        Some(format!(
            "waiting for the replacement of the pod of {workload} evicted {} ago to be Ready",
            humantime::format_duration(Duration::from_secs(since.as_secs()))
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(uids: &[&str]) -> Arc<HashSet<String>> {
        Arc::new(uids.iter().map(ToString::to_string).collect())
    }

    fn workload() -> Workload {
        Workload { namespace: "shop".into(), kind: "ReplicaSet".into(), name: "web".into() }
    }

    #[test]
    fn a_strategy_proposing_the_replacement_of_another_strategys_eviction_is_a_conflict_said_once() {
        let pacing = Pacing { window: Duration::from_secs(3600), ..Pacing::default() };
        let mut memory = Memory::default();
        let start = Instant::now();
        memory.record_eviction(Some(&workload()), known(&["a", "b"]), "low-node-utilization", start);
        let later = start + Duration::from_secs(60);
        assert_eq!(memory.undoing(&workload(), "b", "high-node-utilization", &pacing, later), None, "b was there before: not a replacement");
        assert_eq!(memory.undoing(&workload(), "c", "low-node-utilization", &pacing, later), None, "the same strategy: backoff's business");
        let conflict = memory.undoing(&workload(), "c", "high-node-utilization", &pacing, later).unwrap();
        assert_eq!((conflict.evicted_by.as_str(), conflict.proposed_by.as_str()), ("low-node-utilization", "high-node-utilization"));
        assert_eq!(memory.undoing(&workload(), "d", "high-node-utilization", &pacing, later), None, "said once per window");
        let after_window = start + Duration::from_secs(3700);
        assert_eq!(memory.undoing(&workload(), "c", "high-node-utilization", &pacing, after_window), None, "the eviction is out of the window");
        // Restored evictions do not say which strategy evicted: no conflict is guessed.
        let mut restored = Memory::default();
        restored.restore(&memory.to_record(later, 1_000_000), later, 1_000_000);
        assert_eq!(restored.undoing(&workload(), "z", "anything", &pacing, later), None);
    }

    #[test]
    fn pacing_waits_for_a_ready_replacement_or_the_timeout() {
        let pacing = Pacing { replacement_timeout: Duration::from_secs(600), ..Pacing::default() };
        let mut memory = Memory::default();
        let start = Instant::now();
        assert_eq!(memory.awaiting_replacement(&workload(), &[], &pacing, start), None, "never evicted");
        memory.record_eviction(Some(&workload()), known(&["a", "b", "c"]), "taints", start);
        let later = start + Duration::from_secs(30);
        let waiting = memory.awaiting_replacement(&workload(), &["a", "b"], &pacing, later).unwrap();
        assert_eq!(waiting, "waiting for the replacement of the pod of ReplicaSet shop/web evicted 30s ago to be Ready");
        assert_eq!(memory.awaiting_replacement(&workload(), &["a", "b", "d"], &pacing, later), None, "a new pod is Ready");
        assert_eq!(memory.awaiting_replacement(&workload(), &[], &pacing, start + Duration::from_secs(600)), None, "timed out");
    }

    #[test]
    fn a_workload_evicted_too_often_keeps_its_replacements_until_the_window_moves_on() {
        let pacing = Pacing { max_evictions_per_workload: 2, window: Duration::from_secs(3600), ..Pacing::default() };
        let mut memory = Memory::default();
        let start = Instant::now();
        memory.record_eviction(Some(&workload()), known(&["a", "b", "c"]), "taints", start);
        assert_eq!(memory.backing_off(&workload(), "d", &pacing, start), None);
        memory.record_eviction(Some(&workload()), known(&["b", "c", "d"]), "taints", start + Duration::from_secs(60));
        let later = start + Duration::from_secs(61);
        assert_eq!(
            memory.backing_off(&workload(), "d", &pacing, later).unwrap(),
            "ReplicaSet shop/web lost 2 pods within 1h and this one replaced one of them; it backs off"
        );
        assert_eq!(memory.backing_off(&workload(), "c", &pacing, later), None, "an original pod may still go: a drain finishes");
        assert_eq!(memory.backing_off(&workload(), "d", &pacing, start + Duration::from_secs(3601)), None, "the first left the window");
        memory.prune(&pacing, start + Duration::from_secs(3700));
        assert!(memory.evictions.is_empty());
    }

    #[test]
    fn a_restart_restores_the_workloads_evictions_from_the_record() {
        let pacing =
            Pacing { max_evictions_per_workload: 1, window: Duration::from_secs(3600), replacement_timeout: Duration::from_secs(600), ..Pacing::default() };
        let mut before = Memory::default();
        let start = Instant::now();
        before.record_eviction(Some(&workload()), known(&["a", "b"]), "taints", start);
        let record = before.to_record(start + Duration::from_secs(30), 1_000_030);
        assert_eq!(record["shop/ReplicaSet/web"], WorkloadRecord { evicted_at: vec![1_000_000], known: vec!["a".into(), "b".into()], first_known: Vec::new() });
        // Another process, its own clock: 30 s after the eviction as the wall clock says.
        let mut after = Memory::default();
        let now = Instant::now();
        after.restore(&record, now, 1_000_030);
        assert!(after.backing_off(&workload(), "c", &pacing, now).is_some(), "the window's one eviction is spent on a replacement");
        // Two evictions: the first one's pods come back too, so an original pod may still go after a failover.
        before.record_eviction(Some(&workload()), known(&["b", "c"]), "taints", start + Duration::from_secs(10));
        let record = before.to_record(start + Duration::from_secs(30), 1_000_030);
        assert_eq!(record["shop/ReplicaSet/web"].first_known, ["a", "b"]);
        let mut restarted = Memory::default();
        restarted.restore(&record, now, 1_000_030);
        assert_eq!(restarted.backing_off(&workload(), "b", &pacing, now), None, "an original pod");
        assert!(restarted.backing_off(&workload(), "c", &pacing, now).is_some(), "a replacement");
        let waiting = after.awaiting_replacement(&workload(), &["a", "b"], &pacing, now).unwrap();
        assert!(waiting.ends_with("evicted 30s ago to be Ready"), "{waiting}");
    }

    #[test]
    fn budget_refusals_wait_doubling_and_bounded() {
        let mut memory = Memory::default();
        let start = Instant::now();
        let base = Duration::from_secs(60);
        let waits: Vec<u64> = (0..7).map(|_| memory.record_refusal("u", base, start).as_secs()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 960, 960]);
        assert!(memory.refused_recently("u", start + Duration::from_secs(959)).unwrap().contains("refused its eviction 7 time(s); the next try waits 16m"));
        assert_eq!(memory.refused_recently("u", start + Duration::from_secs(960)), None);
        assert_eq!(memory.refused_recently("other", start), None);
    }
}
