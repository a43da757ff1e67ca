//! The scheduling queue, as kube-scheduler's: pods wait in activeQ (priority, then age), in backoff after an
//! error (1 s doubling to 10 s), or among the unschedulable until a cluster change (or at most 5 minutes) makes
//! another attempt worthwhile. Pods deleted or bound by someone else leave the queue. Unlike kube-scheduler's,
//! activeQ gives profiles and namespaces turns among pods of equal priority ([`ActiveQueue`]): profiles by the
//! time their decisions take, so one profile's slow policy does not make every other profile's pods wait behind
//! its own; namespaces by pods, so a burst in one namespace does not make every other namespace wait for all of
//! it.

use crate::contract::types::Pod;
use crate::shrink::ShrinkWhenSparse;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[derive(Clone)]
pub struct QueuedPod {
    pub pod: Pod,
    pub attempts: u32,
    /// When the pod first entered the queue, for end-to-end latency.
    pub first_queued: Instant,
    /// Which changes may let it fit, as its last attempt's rejections say (node changes always may).
    pub helped_by: HelpedBy,
    /// The queue's change counts when the pod was popped: what changed during its attempt (see
    /// [`SchedulingQueue::unschedulable`]).
    pub(super) changes_at_pop: ChangeCounts,
}

/// Which cluster changes, besides node changes, may let a pod that did not fit fit now: kube-scheduler's
/// queueing hints, coarsely, from the reasons its nodes were rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HelpedBy {
    /// A pod bound somewhere: for pods a policy that sees pods rejected (topology spread, affinity).
    pub pods_added: bool,
    /// A pod gone from a node: for pods rejected for room, ports, anti-affinity or any reason not fixed by the
    /// node itself (taints, node affinity, a cordon stay as they are when a pod leaves).
    pub pods_removed: bool,
    /// Nothing needs to change: a policy failed rather than judged (a timeout, a trap, an open circuit breaker),
    /// and may answer next time. kube-scheduler's Error status: the pod is tried again after its backoff (1 s
    /// doubling to 10 s) instead of waiting for a cluster change or five minutes.
    pub retry_soon: bool,
}

impl HelpedBy {
    fn by(self, change: Change) -> bool {
        match change {
            Change::NodeChanged => true,
            Change::PodAdded => self.pods_added,
            Change::PodRemoved => self.pods_removed,
        }
    }
}

/// How many cluster changes of each kind the queue has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ChangeCounts {
    nodes_changed: u64,
    pods_added: u64,
    pods_removed: u64,
}

impl ChangeCounts {
    fn count(&mut self, change: Change) {
        match change {
            Change::NodeChanged => self.nodes_changed += 1,
            Change::PodAdded => self.pods_added += 1,
            Change::PodRemoved => self.pods_removed += 1,
        }
    }

    /// Whether a change that helps `helped_by` happened between `before` and `self`.
    fn helped_since(&self, before: ChangeCounts, helped_by: HelpedBy) -> bool {
        self.nodes_changed != before.nodes_changed
            || (helped_by.pods_added && self.pods_added != before.pods_added)
            || (helped_by.pods_removed && self.pods_removed != before.pods_removed)
    }
}

/// What changed in the cluster, to retry only the unschedulable pods it may help (kube-scheduler's queueing
/// hints, coarsely).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A node was added, or changed in what policies see.
    NodeChanged,
    /// A pod stopped using a node: its resources are free.
    PodRemoved,
    /// A pod was bound: helps only pods waiting for other pods.
    PodAdded,
}

/// An entry of activeQ, ordered higher priority first, then older first. The pod itself stays in `places`: a
/// second copy of every pending pod here doubled the queue's memory during a burst.
#[derive(PartialEq, Eq)]
struct Active {
    priority: i32,
    created_at: i64,
    uid: String,
}

impl Active {
    fn of(pod: &Pod) -> Self {
        Active { priority: pod.priority, created_at: pod.created_at, uid: pod.uid.clone() }
    }
}

impl PartialOrd for Active {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Active {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then_with(|| other.created_at.cmp(&self.created_at)).then_with(|| other.uid.cmp(&self.uid))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    Active,
    Backoff(Instant),
    Unschedulable(Instant),
    /// Popped and being scheduled or bound.
    InFlight,
}

/// activeQ. The next pod is the highest priority's. Among profiles whose next pods have that priority, the
/// profile whose decisions have taken the least time goes first ([`ProfileTurns`]); within a profile, the
/// namespace served longest ago ([`NamespaceTurns`]).
#[derive(Default)]
struct ActiveQueue {
    by_profile: HashMap<String, NamespaceTurns>,
    turns: ProfileTurns,
}

impl ActiveQueue {
    fn push(&mut self, pod: &Pod) {
        if !self.by_profile.contains_key(&pod.scheduler_name) {
            self.turns.joined(&pod.scheduler_name, self.by_profile.keys());
        }
        self.by_profile.entry(pod.scheduler_name.clone()).or_default().push(pod);
    }

    /// The profile whose next pod goes first.
    fn next_profile(&self) -> Option<String> {
        let heads = self.by_profile.iter().filter_map(|(profile, namespaces)| Some((profile, namespaces.head()?.1)));
        let first = heads.max_by(|(profile, head), (other_profile, other_head)| {
            head.priority
                .cmp(&other_head.priority)
                .then_with(|| self.turns.used(other_profile).cmp(&self.turns.used(profile)))
                .then_with(|| head.cmp(other_head))
        });
        first.map(|(profile, _)| profile.clone())
    }

    /// The uid of the next pod `current` accepts; entries it refuses (pods that left or moved since they were
    /// pushed) are dropped.
    fn pop(&mut self, mut current: impl FnMut(&str) -> bool) -> Option<String> {
        loop {
            let profile = self.next_profile()?;
            let namespaces = self.by_profile.get_mut(&profile)?;
            let uid = namespaces.pop(&mut current);
            if namespaces.is_empty() {
                self.by_profile.remove(&profile);
            }
            if uid.is_some() {
                return uid;
            }
        }
    }
}

/// How long each profile's decisions have taken, so a profile whose policies are slow (one that spins until its
/// deadline on every pod) takes turns by time, not by pod, and does not make the other profiles' pods wait
/// behind each of its own (a weighted fair queue with equal weights). Kept while the host runs: profiles are few.
#[derive(Default)]
struct ProfileTurns {
    used: HashMap<String, Duration>,
}

impl ProfileTurns {
    fn used(&self, profile: &str) -> Duration {
        self.used.get(profile).copied().unwrap_or_default()
    }

    /// A profile that had nothing waiting has pods again: it starts no earlier than the profiles waiting now
    /// (`waiting`), so time it did not use while idle is not a credit to spend ahead of them.
    fn joined<'a>(&mut self, profile: &str, waiting: impl Iterator<Item = &'a String>) {
        let floor = waiting.map(|other| self.used(other)).min().unwrap_or_default();
        let used = self.used.entry(profile.to_string()).or_default();
        *used = (*used).max(floor);
    }

    fn charge(&mut self, profile: &str, spent: Duration) {
        let used = self.used.entry(profile.to_string()).or_default();
        *used = used.saturating_add(spent);
    }
}

/// One profile's pods in activeQ: each namespace's in order (priority, then age). The next pod is the highest
/// priority's; among namespaces whose next pods have that priority, the namespace served longest ago goes first
/// (one that had nothing waiting counts as never served), so namespaces of equal priority alternate.
#[derive(Default)]
struct NamespaceTurns {
    by_namespace: HashMap<String, BinaryHeap<Active>>,
    /// When each namespace with pods here last had one taken, as a count of pods taken.
    last_served: HashMap<String, u64>,
    taken: u64,
}

impl NamespaceTurns {
    fn push(&mut self, pod: &Pod) {
        self.by_namespace.entry(pod.namespace.clone()).or_default().push(Active::of(pod));
    }

    fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    /// The namespace whose next pod goes first, and that pod.
    fn head(&self) -> Option<(&String, &Active)> {
        let served = |namespace: &str| self.last_served.get(namespace).copied().unwrap_or(0);
        let heads = self.by_namespace.iter().filter_map(|(namespace, pods)| Some((namespace, pods.peek()?)));
        heads.max_by(|(namespace, head), (other_namespace, other_head)| {
            head.priority.cmp(&other_head.priority).then_with(|| served(other_namespace).cmp(&served(namespace))).then_with(|| head.cmp(other_head))
        })
    }

    /// As [`ActiveQueue::pop`], within the profile; None once it has nothing `current` accepts.
    fn pop(&mut self, current: &mut impl FnMut(&str) -> bool) -> Option<String> {
        loop {
            let namespace = self.head()?.0.clone();
            let pods = self.by_namespace.get_mut(&namespace)?;
            let entry = pods.pop();
            let emptied = pods.is_empty();
            pods.shrink_when_sparse();
            if emptied {
                self.by_namespace.remove(&namespace);
                self.last_served.remove(&namespace);
            }
            let Some(entry) = entry.filter(|entry| current(&entry.uid)) else { continue };
            if !emptied {
                self.taken += 1;
                self.last_served.insert(namespace, self.taken);
            }
            return Some(entry.uid);
        }
    }
}

#[derive(Default)]
struct Inner {
    active: ActiveQueue,
    places: HashMap<String, (Place, QueuedPod)>,
    /// When a pod in backoff is due, or an unschedulable one has waited the longest allowed. Entries go stale
    /// when a pod moves on; they are checked against `places` when they come due.
    timers: BinaryHeap<Reverse<(Instant, String)>>,
    /// Uids of unschedulable pods, so a cluster change touches only them.
    unschedulable: HashSet<String>,
    changes: ChangeCounts,
}

impl Inner {
    fn place(&mut self, uid: &str, place: Place) {
        let Some((current, _)) = self.places.get_mut(uid) else { return };
        *current = place;
        match place {
            Place::Backoff(due) => self.timers.push(Reverse((due, uid.to_string()))),
            Place::Unschedulable(since) => self.timers.push(Reverse((since + MAX_UNSCHEDULABLE, uid.to_string()))),
            _ => {}
        }
        if matches!(place, Place::Unschedulable(_)) {
            self.unschedulable.insert(uid.to_string());
        } else {
            self.unschedulable.remove(uid);
        }
    }

    /// Moves pods whose timer came due to activeQ.
    fn release_due(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, uid))) = self.timers.pop() else { break };
            let due = match self.places.get(&uid) {
                Some((Place::Backoff(due), _)) => *due == at,
                Some((Place::Unschedulable(since), _)) => *since + MAX_UNSCHEDULABLE == at,
                _ => false,
            };
            if due {
                self.place(&uid, Place::Active);
                self.active.push(&self.places[&uid].1.pod);
            }
        }
    }
}

#[derive(Default)]
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    wake: Notify,
}

/// Pods per queue, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueSizes {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
}

fn backoff_for(attempts: u32) -> Duration {
    INITIAL_BACKOFF.saturating_mul(1 << attempts.saturating_sub(1).min(8)).min(MAX_BACKOFF)
}

impl SchedulingQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A pending pod was added or changed. New pods go to activeQ; known ones keep their place with the newer
    /// object (activeQ entries are refreshed when popped), except that an unschedulable pod whose scheduling
    /// inputs changed (tolerations, affinity, requests, ...) gets another attempt after its backoff. The pod
    /// record carries no conditions, so our own `PodScheduled=False` updates do not count as a change.
    pub fn upsert(&self, pod: Pod) {
        let mut inner = self.lock();
        if let Some((place, queued)) = inner.places.get_mut(&pod.uid) {
            let changed = queued.pod != pod;
            queued.pod = pod;
            if changed && matches!(place, Place::Unschedulable(_)) {
                let due = Instant::now() + backoff_for(queued.attempts);
                let uid = queued.pod.uid.clone();
                inner.place(&uid, Place::Backoff(due));
                drop(inner);
                self.wake.notify_one();
            }
            return;
        }
        inner.active.push(&pod);
        let queued = QueuedPod { pod, attempts: 0, first_queued: Instant::now(), helped_by: HelpedBy::default(), changes_at_pop: ChangeCounts::default() };
        inner.places.insert(queued.pod.uid.clone(), (Place::Active, queued));
        drop(inner);
        self.wake.notify_one();
    }

    /// The pod was deleted, or bound (by us or anyone): it leaves the queue.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.lock();
        inner.places.remove(uid);
        inner.unschedulable.remove(uid);
        inner.places.shrink_when_sparse();
    }

    /// Drops every waiting pod (not one being scheduled now) for which `keep` is false.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut inner = self.lock();
        let gone: Vec<String> = inner.places.iter().filter(|(uid, (place, _))| *place != Place::InFlight && !keep(uid)).map(|(uid, _)| uid.clone()).collect();
        for uid in gone {
            inner.places.remove(&uid);
            inner.unschedulable.remove(&uid);
        }
        inner.places.shrink_when_sparse();
        inner.unschedulable.shrink_when_sparse();
    }

    /// Waits for the next pod to schedule.
    pub async fn pop(&self) -> QueuedPod {
        loop {
            let notified = self.wake.notified();
            if let Some(pod) = self.try_pop() {
                return pod;
            }
            let next_due = self.next_backoff_due();
            match next_due {
                Some(due) => {
                    let _ = tokio::time::timeout(due.saturating_duration_since(Instant::now()), notified).await;
                }
                None => notified.await,
            }
        }
    }

    fn next_backoff_due(&self) -> Option<Instant> {
        self.lock().timers.peek().map(|Reverse((at, _))| *at)
    }

    fn try_pop(&self) -> Option<QueuedPod> {
        let mut inner = self.lock();
        inner.release_due(Instant::now());
        let changes = inner.changes;
        let Inner { active, places, .. } = &mut *inner;
        let uid = active.pop(|uid| places.get(uid).is_some_and(|(place, _)| *place == Place::Active))?;
        let (place, latest) = places.get_mut(&uid)?;
        *place = Place::InFlight;
        latest.changes_at_pop = changes;
        Some(latest.clone())
    }

    /// Takes a waiting pod out of its turn, in flight from now on as if popped: the other members of a gang, for
    /// the group cycle of the one popped. None when it is not waiting (unknown, or in flight already).
    pub fn take(&self, uid: &str) -> Option<QueuedPod> {
        let mut inner = self.lock();
        let changes = inner.changes;
        if inner.places.get(uid).is_none_or(|(place, _)| *place == Place::InFlight) {
            return None;
        }
        // Its activeQ entry and timer stay behind, skipped: they no longer match its place.
        inner.place(uid, Place::InFlight);
        let (_, queued) = inner.places.get_mut(uid)?;
        queued.changes_at_pop = changes;
        Some(queued.clone())
    }

    /// The attempt failed for a transient reason (bind error, API error): retry after the backoff.
    pub fn backoff(&self, mut queued: QueuedPod) {
        queued.attempts += 1;
        let due = Instant::now() + backoff_for(queued.attempts);
        let mut inner = self.lock();
        let uid = queued.pod.uid.clone();
        if let Some(entry) = inner.places.get_mut(&uid) {
            // The pod as last updated (during the attempt, maybe), with the attempt's bookkeeping.
            std::mem::swap(&mut queued.pod, &mut entry.1.pod);
            entry.1 = queued;
            inner.place(&uid, Place::Backoff(due));
        }
        drop(inner);
        self.wake.notify_one();
    }

    /// No node fits: wait for a cluster change. A change that may help the pod and came while it was being
    /// scheduled (its attempt saw the cluster before it) sends it to the backoff instead, as kube-scheduler does
    /// with the events of an attempt in flight: otherwise it would wait for the next change, up to five minutes.
    pub fn unschedulable(&self, mut queued: QueuedPod) {
        queued.attempts += 1;
        let mut inner = self.lock();
        let uid = queued.pod.uid.clone();
        let Some(entry) = inner.places.get_mut(&uid) else { return };
        // An update of the pod during its attempt (a toleration added, say) may be what it needed.
        let updated = entry.1.pod != queued.pod;
        std::mem::swap(&mut queued.pod, &mut entry.1.pod);
        let missed = updated || queued.helped_by.retry_soon || inner.changes.helped_since(queued.changes_at_pop, queued.helped_by);
        let place = if missed { Place::Backoff(Instant::now() + backoff_for(queued.attempts)) } else { Place::Unschedulable(Instant::now()) };
        if let Some(entry) = inner.places.get_mut(&uid) {
            entry.1 = queued;
        }
        inner.place(&uid, place);
        drop(inner);
        if missed {
            self.wake.notify_one();
        }
    }

    /// Something changed that may let unschedulable pods fit: those it can help get another attempt, after
    /// their backoff.
    pub fn cluster_changed(&self, event: Change) {
        let mut inner = self.lock();
        inner.changes.count(event);
        let helped = |uid: &String| inner.places.get(uid).is_some_and(|(_, queued)| queued.helped_by.by(event));
        let waiting: Vec<String> = inner.unschedulable.iter().filter(|uid| helped(uid)).cloned().collect();
        let moved = !waiting.is_empty();
        for uid in waiting {
            let attempts = inner.places.get(&uid).map_or(0, |(_, queued)| queued.attempts);
            inner.place(&uid, Place::Backoff(Instant::now() + backoff_for(attempts)));
        }
        drop(inner);
        if moved {
            self.wake.notify_one();
        }
    }

    /// Something changed for these pods alone (a new member of their gang): those that wait unschedulable get
    /// another attempt, after their backoff.
    pub fn retry(&self, uids: &[String]) {
        let mut inner = self.lock();
        let waiting: Vec<&String> = uids.iter().filter(|uid| inner.unschedulable.contains(*uid)).collect();
        let moved = !waiting.is_empty();
        for uid in waiting {
            let attempts = inner.places.get(uid).map_or(0, |(_, queued)| queued.attempts);
            inner.place(uid, Place::Backoff(Instant::now() + backoff_for(attempts)));
        }
        drop(inner);
        if moved {
            self.wake.notify_one();
        }
    }

    /// A decision for a pod of `profile` took `spent`: what the profile's turns count.
    pub fn charge(&self, profile: &str, spent: Duration) {
        self.lock().active.turns.charge(profile, spent);
    }

    /// How long the pod first queued longest ago has been in the queue (zero when none waits).
    pub fn longest_wait(&self) -> Duration {
        self.lock().places.values().map(|(_, queued)| queued.first_queued.elapsed()).max().unwrap_or_default()
    }

    pub fn sizes(&self) -> QueueSizes {
        let inner = self.lock();
        let mut sizes = QueueSizes::default();
        for (place, _) in inner.places.values() {
            match place {
                Place::Active | Place::InFlight => sizes.active += 1,
                Place::Backoff(_) => sizes.backoff += 1,
                Place::Unschedulable(_) => sizes.unschedulable += 1,
            }
        }
        sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn pod(name: &str, priority: i32, created: &str) -> Pod {
        let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&format!(
            "metadata: {{name: {name}, uid: {name}, creationTimestamp: '{created}'}}\nspec: {{priority: {priority}, containers: [{{name: a}}]}}"
        ))
        .unwrap();
        convert::pod(&source).unwrap()
    }

    #[tokio::test]
    async fn priority_then_age() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("young-low", 0, "2026-01-02T00:00:00Z"));
        queue.upsert(pod("old-low", 0, "2026-01-01T00:00:00Z"));
        queue.upsert(pod("high", 10, "2026-01-03T00:00:00Z"));
        let order: Vec<String> = [queue.pop().await, queue.pop().await, queue.pop().await].into_iter().map(|q| q.pod.name).collect();
        assert_eq!(order, ["high", "old-low", "young-low"]);
    }

    #[tokio::test]
    async fn a_pod_taken_out_of_turn_is_in_flight_and_not_popped_again() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("first", 0, "2026-01-01T00:00:00Z"));
        queue.upsert(pod("member", 0, "2026-01-02T00:00:00Z"));
        let popped = queue.pop().await;
        let taken = queue.take("member").expect("waiting");
        assert!(queue.take("member").is_none() && queue.take(&popped.pod.uid).is_none(), "in flight already");
        assert!(queue.try_pop().is_none(), "its activeQ entry is skipped");
        queue.unschedulable(taken);
        assert_eq!(queue.sizes().unschedulable, 1);
        let taken = queue.take("member").expect("an unschedulable pod can be taken too");
        queue.unschedulable(taken);
        queue.retry(&["member".to_string(), "unknown".to_string()]);
        assert_eq!(queue.sizes().unschedulable, 0, "a new member of its gang: tried again");
    }

    #[tokio::test]
    async fn namespaces_of_equal_priority_take_turns_and_priority_still_goes_first() {
        let queue = SchedulingQueue::default();
        let namespaced = |name: &str, namespace: &str, priority: i32, created: &str| Pod { namespace: namespace.into(), ..pod(name, priority, created) };
        // A burst of five in one namespace, then two pods in another, then a higher priority pod in the first.
        for index in 0..5 {
            queue.upsert(namespaced(&format!("noisy-{index}"), "noisy", 0, &format!("2026-01-01T00:00:0{index}Z")));
        }
        queue.upsert(namespaced("quiet-0", "quiet", 0, "2026-01-01T00:01:00Z"));
        queue.upsert(namespaced("quiet-1", "quiet", 0, "2026-01-01T00:01:01Z"));
        queue.upsert(namespaced("urgent", "noisy", 10, "2026-01-01T00:02:00Z"));
        let mut order = Vec::new();
        while let Some(popped) = queue.try_pop() {
            order.push(popped.pod.name);
        }
        assert_eq!(order, ["urgent", "quiet-0", "noisy-0", "quiet-1", "noisy-1", "noisy-2", "noisy-3", "noisy-4"]);
    }

    #[tokio::test]
    async fn profiles_take_turns_by_the_time_their_decisions_take() {
        let queue = SchedulingQueue::default();
        let of_profile =
            |name: &str, profile: &str, second: u32| Pod { scheduler_name: profile.into(), ..pod(name, 0, &format!("2026-01-01T00:00:{second:02}Z")) };
        // The slow profile's pods are older: by age alone, all of them would go first.
        for index in 0..4 {
            queue.upsert(of_profile(&format!("slow-{index}"), "slow", index));
        }
        for index in 0..6 {
            queue.upsert(of_profile(&format!("fast-{index}"), "fast", 10 + index));
        }
        let mut order = Vec::new();
        while let Some(popped) = queue.try_pop() {
            // A slow decision takes 100 ms, a fast one 10 ms.
            let spent = if popped.pod.scheduler_name == "slow" { 100 } else { 10 };
            queue.charge(&popped.pod.scheduler_name, Duration::from_millis(spent));
            order.push(popped.pod.name);
        }
        assert_eq!(order, ["slow-0", "fast-0", "fast-1", "fast-2", "fast-3", "fast-4", "fast-5", "slow-1", "slow-2", "slow-3"]);
        // A profile that had nothing waiting starts where the waiting ones stand, not with the time it did not use.
        queue.upsert(of_profile("slow-4", "slow", 20));
        queue.upsert(of_profile("slow-5", "slow", 21));
        queue.upsert(of_profile("idle-0", "idle", 30));
        queue.upsert(of_profile("idle-1", "idle", 31));
        queue.charge("idle", Duration::from_millis(10));
        let next: Vec<String> = (0..2).filter_map(|_| queue.try_pop()).map(|popped| popped.pod.name).collect();
        assert_eq!(next, ["slow-4", "slow-5"], "idle joined at slow's time and was charged since");
    }

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let delays: Vec<u64> = (1..=6).map(|attempts| backoff_for(attempts).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
    }

    #[tokio::test(start_paused = true)]
    async fn unschedulable_pods_return_on_cluster_changes_and_removed_pods_never_do() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("a", 0, "2026-01-01T00:00:00Z"));
        queue.upsert(pod("gone", 0, "2026-01-01T00:00:00Z"));
        let first = queue.pop().await;
        let second = queue.pop().await;
        queue.unschedulable(first);
        queue.remove(&second.pod.uid);
        queue.backoff(second);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 0, unschedulable: 1 });
        assert!(queue.try_pop().is_none());
        queue.cluster_changed(Change::NodeChanged);
        assert_eq!(queue.sizes().backoff, 1);
        let again = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        assert_eq!(again.pod.name, "a");
        assert_eq!(again.attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_pod_retries_only_pods_a_removal_may_help() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("tainted-out", 0, "2026-01-01T00:00:00Z"));
        queue.upsert(pod("needs-room", 0, "2026-01-01T00:00:01Z"));
        let tainted_out = queue.pop().await;
        let needs_room = queue.pop().await;
        // Rejected only by the nodes' own taints: no pod leaving changes that.
        queue.unschedulable(QueuedPod { helped_by: HelpedBy::default(), ..tainted_out });
        queue.unschedulable(QueuedPod { helped_by: HelpedBy { pods_added: false, pods_removed: true, retry_soon: false }, ..needs_room });
        queue.cluster_changed(Change::PodRemoved);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 1 });
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap().pod.name, "needs-room");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_updated_during_its_attempt_keeps_the_update_and_is_tried_again() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("p", 0, "2026-01-01T00:00:00Z"));
        let popped = queue.pop().await;
        // A toleration added while the attempt that did not see it runs.
        let mut updated = popped.pod.clone();
        updated.labels.push(("tolerates".into(), "now".into()));
        queue.upsert(updated.clone());
        queue.unschedulable(popped);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 0 }, "the update may be what it needed");
        let again = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        assert_eq!(again.pod, updated, "the newer pod, not the copy the attempt popped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_during_the_attempt_sends_the_pod_to_the_backoff_not_to_wait() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("claimed", 0, "2026-01-01T00:00:00Z"));
        let claimed = queue.pop().await;
        // Its claim is bound while the attempt that found it unbound runs.
        queue.cluster_changed(Change::NodeChanged);
        queue.unschedulable(claimed);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 0 });
        let claimed = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        assert_eq!(claimed.pod.name, "claimed");
        // A pod bound meanwhile helps only a pod that waits for other pods.
        queue.cluster_changed(Change::PodAdded);
        queue.unschedulable(claimed);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 0, unschedulable: 1 }, "a node's room was its reason");
        queue.cluster_changed(Change::NodeChanged);
        let again = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        queue.cluster_changed(Change::PodAdded);
        queue.unschedulable(QueuedPod { helped_by: HelpedBy { pods_added: true, pods_removed: true, retry_soon: false }, ..again });
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 0 }, "a pod waiting for other pods");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_a_policy_failed_on_is_tried_again_after_its_backoff_without_any_change() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("failed-on", 0, "2026-01-01T00:00:00Z"));
        let failed_on = queue.pop().await;
        queue.unschedulable(QueuedPod { helped_by: HelpedBy { retry_soon: true, ..HelpedBy::default() }, ..failed_on });
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 0 });
        let started = Instant::now();
        let again = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        assert_eq!(again.pod.name, "failed-on");
        assert!(started.elapsed() >= INITIAL_BACKOFF && started.elapsed() < MAX_BACKOFF, "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_bound_pod_retries_only_pods_waiting_for_other_pods() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("needs-room", 0, "2026-01-01T00:00:00Z"));
        queue.upsert(pod("needs-spread", 0, "2026-01-01T00:00:01Z"));
        let needs_room = queue.pop().await;
        let needs_spread = queue.pop().await;
        queue.unschedulable(QueuedPod { helped_by: HelpedBy { pods_added: false, pods_removed: true, retry_soon: false }, ..needs_room });
        queue.unschedulable(QueuedPod { helped_by: HelpedBy { pods_added: true, pods_removed: true, retry_soon: false }, ..needs_spread });
        queue.cluster_changed(Change::PodAdded);
        assert_eq!(queue.sizes(), QueueSizes { active: 0, backoff: 1, unschedulable: 1 });
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap().pod.name, "needs-spread");
        queue.cluster_changed(Change::PodRemoved);
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap().pod.name, "needs-room");
    }

    #[tokio::test(start_paused = true)]
    async fn unschedulable_pods_get_another_attempt_after_five_minutes_without_any_change() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("waiting", 0, "2026-01-01T00:00:00Z"));
        let first = queue.pop().await;
        queue.unschedulable(first);
        let started = Instant::now();
        let again = tokio::time::timeout(Duration::from_secs(400), queue.pop()).await.unwrap();
        assert_eq!(again.pod.name, "waiting");
        assert!(started.elapsed() >= MAX_UNSCHEDULABLE, "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn an_edited_unschedulable_pod_is_retried_but_an_unchanged_one_waits() {
        let queue = SchedulingQueue::default();
        queue.upsert(pod("a", 0, "2026-01-01T00:00:00Z"));
        let first = queue.pop().await;
        queue.unschedulable(first.clone());
        queue.upsert(first.pod.clone());
        assert_eq!(queue.sizes().unschedulable, 1, "the same record again is no reason to retry");
        let mut edited = first.pod.clone();
        edited.priority = 5;
        queue.upsert(edited);
        assert_eq!(queue.sizes().backoff, 1);
        let again = tokio::time::timeout(Duration::from_secs(5), queue.pop()).await.unwrap();
        assert_eq!(again.pod.priority, 5);
    }
}
