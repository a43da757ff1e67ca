//! What each namespace's waiting pods may hold in the host together. A waiting pod is bounded on its own
//! (`informer::MAX_WAITING_POD_BYTES`), but a tenant could still create thousands of pods just under that bound;
//! the host keeps a pending record, a queue entry and policy calls for each. A namespace's waiting pods may hold
//! [`MAX_NAMESPACE_WAITING_BYTES`] together (measured as the per-pod bound is); a pod past it is not kept, it is
//! told why, and it is **deferred**. Deferred pods keep their order: when the namespace has room, the oldest
//! deferrals that fit are fetched again (see `informer`) with the room reserved for them, and a new pod of the
//! namespace waits behind them. The bound is the configuration's `scheduler.waitingPodsMibPerNamespace`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// The waiting pods of one namespace, together: a thousand ordinary pods hold a few hundred KiB, 50,000 under
/// 32 MiB; 500 pods of a thousand anti-affinity terms (64 KiB each, just under the per-pod bound) would pass it.
pub const MAX_NAMESPACE_WAITING_BYTES: usize = 32 << 20;

#[derive(Default)]
pub struct WaitingBudget {
    inner: Mutex<Inner>,
    /// Signalled when deferred pods are ready to be fetched again.
    readmit: Notify,
    /// Bytes per namespace; 0 for [`MAX_NAMESPACE_WAITING_BYTES`].
    limit: AtomicUsize,
}

#[derive(Default)]
struct Inner {
    /// Bytes held by each namespace's waiting pods.
    held: HashMap<String, usize>,
    /// Each waiting pod's namespace and bytes, by uid.
    waiting: HashMap<String, (String, usize)>,
    /// Deferred pods of each namespace, by when they were first deferred.
    deferred: HashMap<String, BTreeMap<u64, Deferred>>,
    /// Where each deferred pod is in `deferred`, by uid.
    deferred_at: HashMap<String, (String, u64)>,
    deferrals: u64,
    /// Deferred pods being fetched again, by uid: their room is held for them until they are observed.
    reserved: HashMap<String, (String, u64, Deferred)>,
    /// Bytes held for `reserved` pods, by namespace.
    reserved_bytes: HashMap<String, usize>,
    /// Deferred pods to fetch again: namespace, name and uid.
    to_readmit: Vec<(String, String, String)>,
}

#[derive(Clone)]
struct Deferred {
    name: String,
    uid: String,
    bytes: usize,
}

impl Inner {
    fn held(&self, namespace: &str) -> usize {
        self.held.get(namespace).copied().unwrap_or(0) + self.reserved_bytes.get(namespace).copied().unwrap_or(0)
    }

    fn add_held(&mut self, namespace: &str, bytes: isize) {
        let held = self.held.entry(namespace.to_string()).or_default();
        *held = held.saturating_add_signed(bytes);
        if *held == 0 {
            self.held.remove(namespace);
        }
    }

    fn unreserve(&mut self, uid: &str) -> Option<(String, u64, Deferred)> {
        let reserved = self.reserved.remove(uid)?;
        let bytes = self.reserved_bytes.entry(reserved.0.clone()).or_default();
        *bytes = bytes.saturating_sub(reserved.2.bytes);
        if *bytes == 0 {
            self.reserved_bytes.remove(&reserved.0);
        }
        Some(reserved)
    }

    /// Takes the pod out of the deferred ones; the namespace it was deferred in.
    fn undefer(&mut self, uid: &str) -> Option<String> {
        let (namespace, at) = self.deferred_at.remove(uid)?;
        if let Some(deferred) = self.deferred.get_mut(&namespace) {
            deferred.remove(&at);
            if deferred.is_empty() {
                self.deferred.remove(&namespace);
            }
        }
        Some(namespace)
    }

    /// Puts `pod` among `namespace`'s deferred pods at `at`.
    fn defer_at(&mut self, namespace: &str, at: u64, pod: Deferred) {
        self.deferred_at.insert(pod.uid.clone(), (namespace.to_string(), at));
        self.deferred.entry(namespace.to_string()).or_default().insert(at, pod);
    }

    /// Reserves the namespace's room for its oldest deferred pods that fit; whether any was.
    fn offer_room(&mut self, namespace: &str, limit: usize) -> bool {
        let mut room = limit.saturating_sub(self.held(namespace));
        let mut ready = Vec::new();
        if let Some(deferred) = self.deferred.get_mut(namespace) {
            while let Some(entry) = deferred.first_entry() {
                if entry.get().bytes > room {
                    break;
                }
                room -= entry.get().bytes;
                let at = *entry.key();
                ready.push((at, entry.remove()));
            }
            if deferred.is_empty() {
                self.deferred.remove(namespace);
            }
        }
        let offered = !ready.is_empty();
        for (at, pod) in ready {
            self.deferred_at.remove(&pod.uid);
            *self.reserved_bytes.entry(namespace.to_string()).or_default() += pod.bytes;
            self.to_readmit.push((namespace.to_string(), pod.name.clone(), pod.uid.clone()));
            self.reserved.insert(pod.uid.clone(), (namespace.to_string(), at, pod));
        }
        offered
    }
}

impl WaitingBudget {
    /// The bound per namespace from now on (the configuration's). Pods already waiting stay while they do not
    /// grow; a larger bound readmits deferred pods at once.
    pub fn set_limit(&self, bytes: usize) {
        let before = self.limit.swap(bytes, Ordering::Relaxed);
        if bytes > before && before != 0 {
            self.offer_room_everywhere();
        }
    }

    fn limit(&self) -> usize {
        match self.limit.load(Ordering::Relaxed) {
            0 => MAX_NAMESPACE_WAITING_BYTES,
            bytes => bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a waiting pod of `bytes` in `namespace` (again, when it changed). Err with the reason when the
    /// namespace has no room for it or older deferred pods wait ahead of it; nothing is counted then, and the
    /// caller defers it ([`defer`](Self::defer)). A pod already waiting that did not grow, or one whose room was
    /// reserved, is admitted whatever the bound.
    pub fn admit(&self, namespace: &str, uid: &str, bytes: usize) -> Result<(), String> {
        let limit = self.limit();
        let mut inner = self.lock();
        let reserved = inner.unreserve(uid);
        let before = inner.waiting.get(uid).map(|(_, bytes)| *bytes);
        let queued_behind =
            reserved.is_none() && before.is_none() && inner.deferred.get(namespace).is_some_and(|deferred| deferred.values().any(|pod| pod.uid != uid));
        let fits = inner.held(namespace) - before.unwrap_or(0) + bytes <= limit;
        let kept = before.is_some_and(|before| bytes <= before) || reserved.is_some() && fits;
        if !kept && (queued_behind || !fits) {
            if let Some((namespace, at, pod)) = reserved {
                // Room freed for it was taken meanwhile: it keeps its place at the head.
                inner.defer_at(&namespace, at, Deferred { bytes, ..pod });
            }
            // The same words whatever the namespace holds now: the reason is written into the pod's condition
            // once, and a message that changed with every other pod would be written again at every event.
            return Err(format!(
                "the waiting pods of namespace {namespace} hold the {} KiB the host keeps for one namespace; this pod is tried again when some of them are scheduled or deleted",
                limit / 1024
            ));
        }
        let _ = inner.undefer(uid);
        inner.add_held(namespace, bytes as isize - before.unwrap_or(0) as isize);
        inner.waiting.insert(uid.to_string(), (namespace.to_string(), bytes));
        Ok(())
    }

    /// Remembers a pod [`admit`](Self::admit) refused, to fetch again when its namespace has room. A pod deferred
    /// already keeps its place.
    pub fn defer(&self, namespace: &str, name: &str, uid: &str, bytes: usize) {
        let mut inner = self.lock();
        if let Some((namespace, at)) = inner.deferred_at.get(uid).cloned() {
            if let Some(pod) = inner.deferred.get_mut(&namespace).and_then(|deferred| deferred.get_mut(&at)) {
                pod.bytes = bytes;
            }
            return;
        }
        inner.deferrals += 1;
        let at = inner.deferrals;
        inner.defer_at(namespace, at, Deferred { name: name.to_string(), uid: uid.to_string(), bytes });
        let limit = self.limit();
        // A namespace with nothing waiting gets no release to readmit it: offer its room now.
        if inner.held(namespace) == 0 && inner.offer_room(namespace, limit) {
            drop(inner);
            self.readmit.notify_one();
        }
    }

    /// The pod no longer waits (bound, deleted, not kept any more): what it held is freed, and the oldest deferred
    /// pods of its namespace that fit in the room are queued to be fetched again.
    pub fn release(&self, uid: &str) {
        let limit = self.limit();
        let mut inner = self.lock();
        let Some((namespace, bytes)) = inner.waiting.remove(uid) else { return };
        inner.add_held(&namespace, -(bytes as isize));
        if inner.offer_room(&namespace, limit) {
            drop(inner);
            self.readmit.notify_one();
        }
    }

    /// The pod is gone or will not wait (deleted, bound by anyone, finished): it is neither waiting nor deferred.
    pub fn forget(&self, uid: &str) {
        let mut inner = self.lock();
        let deferred_in = inner.undefer(uid).or_else(|| inner.unreserve(uid).map(|(namespace, ..)| namespace));
        drop(inner);
        self.release(uid);
        // What it held, or the place it took ahead of others, is free.
        if let Some(namespace) = deferred_in {
            self.offer_room_in(&namespace);
        }
    }

    /// A deferred pod being fetched again could not be: it goes back to its place, to be tried at the next room
    /// (or [`offer_room_everywhere`](Self::offer_room_everywhere)).
    pub fn not_fetched(&self, uid: &str) {
        let mut inner = self.lock();
        if let Some((namespace, at, pod)) = inner.unreserve(uid) {
            inner.defer_at(&namespace, at, pod);
        }
    }

    fn offer_room_in(&self, namespace: &str) {
        let limit = self.limit();
        if self.lock().offer_room(namespace, limit) {
            self.readmit.notify_one();
        }
    }

    /// Offers every namespace's room to its deferred pods (after fetches failed, or the bound grew).
    pub fn offer_room_everywhere(&self) {
        let namespaces: Vec<String> = self.lock().deferred.keys().cloned().collect();
        for namespace in namespaces {
            self.offer_room_in(&namespace);
        }
    }

    /// Resolves when deferred pods are ready to be fetched again.
    pub async fn readmissions_ready(&self) {
        self.readmit.notified().await
    }

    /// Up to `most` deferred pods to fetch again: namespace, name and uid. More are signalled as ready.
    pub fn take_readmissions(&self, most: usize) -> Vec<(String, String, String)> {
        let mut inner = self.lock();
        let keep = inner.to_readmit.len().saturating_sub(most);
        let taken = inner.to_readmit.split_off(keep);
        if keep > 0 {
            self.readmit.notify_one();
        }
        taken
    }

    /// Bytes held by `namespace`'s waiting pods, and how many pods of it are deferred (or being fetched again).
    pub fn usage(&self, namespace: &str) -> (usize, usize) {
        let inner = self.lock();
        let reserved = inner.reserved.values().filter(|(reserved_in, ..)| reserved_in == namespace).count();
        (inner.held.get(namespace).copied().unwrap_or(0), inner.deferred.get(namespace).map_or(0, BTreeMap::len) + reserved)
    }

    /// Deferred pods in every namespace (or being fetched again).
    pub fn deferred(&self) -> usize {
        let inner = self.lock();
        inner.deferred_at.len() + inner.reserved.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(readmissions: Vec<(String, String, String)>) -> Vec<String> {
        readmissions.into_iter().map(|(_, name, _)| name).collect()
    }

    #[test]
    fn a_namespace_past_its_budget_defers_pods_and_readmits_them_as_room_frees() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        assert_eq!(budget.admit("noisy", "a", 60), Ok(()));
        assert_eq!(budget.admit("noisy", "a", 70), Ok(()), "the same pod grown: counted once");
        assert!(budget.admit("noisy", "b", 40).unwrap_err().contains("namespace noisy hold the 0 KiB"));
        budget.defer("noisy", "b", "b", 40);
        assert!(budget.admit("noisy", "c", 20).is_err(), "room for it, but b waits ahead");
        budget.defer("noisy", "c", "c", 20);
        assert_eq!(budget.admit("quiet", "q", 90), Ok(()), "another namespace has its own budget");
        assert_eq!(budget.usage("noisy"), (70, 2));
        budget.release("q");
        assert!(budget.take_readmissions(10).is_empty(), "room in another namespace readmits nothing");
        budget.release("a");
        assert_eq!(names(budget.take_readmissions(10)), ["b", "c"]);
        // Their room is held for them: a new pod waits behind.
        assert!(budget.admit("noisy", "d", 50).is_err());
        assert_eq!(budget.admit("noisy", "b", 40), Ok(()));
        assert_eq!(budget.admit("noisy", "c", 20), Ok(()));
        assert_eq!(budget.usage("noisy"), (60, 0));
    }

    #[test]
    fn deferred_pods_keep_their_place_and_gone_ones_give_theirs_up() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        budget.admit("noisy", "a", 50).unwrap();
        budget.admit("noisy", "b", 50).unwrap();
        for (name, bytes) in [("c", 50), ("d", 50), ("e", 10)] {
            budget.defer("noisy", name, name, bytes);
        }
        budget.defer("noisy", "c", "c", 50);
        budget.forget("d");
        assert_eq!(budget.usage("noisy"), (100, 2));
        budget.release("a");
        assert_eq!(names(budget.take_readmissions(10)), ["c"], "50 bytes free: c fits, e waits its turn behind it");
        // c could not be fetched: back at the head, offered again when asked.
        budget.not_fetched("c");
        budget.offer_room_everywhere();
        assert_eq!(names(budget.take_readmissions(10)), ["c"]);
        // c was deleted meanwhile: its room goes to e.
        budget.forget("c");
        assert_eq!(names(budget.take_readmissions(10)), ["e"]);
    }

    #[test]
    fn a_waiting_pod_stays_when_the_bound_shrinks_and_a_larger_bound_readmits() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        budget.admit("noisy", "a", 80).unwrap();
        budget.defer("noisy", "b", "b", 40);
        budget.set_limit(50);
        assert_eq!(budget.admit("noisy", "a", 80), Ok(()), "an update of a waiting pod that did not grow");
        budget.set_limit(200);
        assert_eq!(names(budget.take_readmissions(10)), ["b"]);
    }

    #[test]
    fn a_namespace_with_nothing_waiting_readmits_a_deferred_pod_at_once() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        budget.admit("noisy", "a", 80).unwrap();
        budget.defer("noisy", "b", "b", 40);
        budget.forget("a");
        assert_eq!(names(budget.take_readmissions(10)), ["b"]);
        // Fetched and found bound elsewhere: a pod deferred later is offered the room at once.
        budget.forget("b");
        budget.defer("noisy", "c", "c", 40);
        assert_eq!(names(budget.take_readmissions(10)), ["c"]);
    }
}
