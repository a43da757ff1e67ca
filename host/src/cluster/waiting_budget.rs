//! What each namespace's waiting pods may hold in the host together. A waiting pod is bounded on its own
//! (`informer::MAX_WAITING_POD_BYTES`), but a tenant could still create thousands of pods just under that bound;
//! the host keeps a pending record, a queue entry and policy calls for each. A namespace's waiting pods may hold
//! [`MAX_NAMESPACE_WAITING_BYTES`] together (measured as the per-pod bound is); a pod past it is not kept, it is
//! told why, and it is **deferred**: when waiting pods of its namespace leave (bound, deleted), deferred pods that
//! may fit in the room freed are fetched again and admitted (see `informer`), oldest deferral first. The bound is
//! the configuration's `scheduler.waitingPodsMibPerNamespace`.

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
    /// Deferred pods of each namespace, in the order they were deferred: name, uid and bytes when last measured.
    deferred: HashMap<String, BTreeMap<u64, Deferred>>,
    /// Where each deferred pod is in `deferred`, by uid.
    deferred_at: HashMap<String, (String, u64)>,
    deferrals: u64,
    /// Deferred pods to fetch again (namespace, name, uid).
    to_readmit: Vec<(String, String, String)>,
}

struct Deferred {
    name: String,
    uid: String,
    bytes: usize,
}

impl WaitingBudget {
    /// The bound per namespace from now on (the configuration's); pods already waiting stay.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
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

    /// Counts a waiting pod of `bytes` in `namespace` (again, when it changed); Err with the reason when the
    /// namespace has no room for it, in which case nothing is counted and the caller defers it.
    pub fn admit(&self, namespace: &str, uid: &str, bytes: usize) -> Result<(), String> {
        let limit = self.limit();
        let mut inner = self.lock();
        let before = inner.waiting.get(uid).map_or(0, |(_, bytes)| *bytes);
        let held = inner.held.get(namespace).copied().unwrap_or(0) - before;
        if held + bytes > limit {
            // The same words whatever the namespace holds now: the reason is written into the pod's condition
            // once, and a message that changed with every other pod would be written again at every event.
            return Err(format!(
                "the waiting pods of namespace {namespace} hold the {} KiB the host keeps for one namespace; this pod is tried again when some of them are scheduled or deleted",
                limit / 1024
            ));
        }
        inner.held.insert(namespace.to_string(), held + bytes);
        inner.waiting.insert(uid.to_string(), (namespace.to_string(), bytes));
        Ok(())
    }

    /// Remembers a pod [`admit`](Self::admit) refused, to fetch again when its namespace has room.
    pub fn defer(&self, namespace: &str, name: &str, uid: &str, bytes: usize) {
        let mut inner = self.lock();
        inner.deferrals += 1;
        let at = inner.deferrals;
        inner.deferred.entry(namespace.to_string()).or_default().insert(at, Deferred { name: name.to_string(), uid: uid.to_string(), bytes });
        inner.deferred_at.insert(uid.to_string(), (namespace.to_string(), at));
    }

    /// The pod no longer waits, or is no longer deferred (bound, deleted, refused for another reason): what it
    /// held is freed, and deferred pods of its namespace that may fit in the room are queued to be fetched again.
    pub fn release(&self, uid: &str) {
        let limit = self.limit();
        let mut inner = self.lock();
        if let Some((namespace, at)) = inner.deferred_at.remove(uid) {
            if let Some(deferred) = inner.deferred.get_mut(&namespace) {
                deferred.remove(&at);
                if deferred.is_empty() {
                    inner.deferred.remove(&namespace);
                }
            }
        }
        let Some((namespace, bytes)) = inner.waiting.remove(uid) else { return };
        let held = inner.held.get(&namespace).copied().unwrap_or(0).saturating_sub(bytes);
        if held == 0 {
            inner.held.remove(&namespace);
        } else {
            inner.held.insert(namespace.clone(), held);
        }
        let Some(deferred) = inner.deferred.get_mut(&namespace) else { return };
        let mut room = limit.saturating_sub(held);
        let mut ready = Vec::new();
        while let Some(entry) = deferred.first_entry() {
            if entry.get().bytes > room {
                break;
            }
            room -= entry.get().bytes;
            ready.push(entry.remove());
        }
        if deferred.is_empty() {
            inner.deferred.remove(&namespace);
        }
        if ready.is_empty() {
            return;
        }
        for pod in ready {
            inner.deferred_at.remove(&pod.uid);
            inner.to_readmit.push((namespace.clone(), pod.name, pod.uid));
        }
        drop(inner);
        self.readmit.notify_one();
    }

    /// Resolves when deferred pods are ready to be fetched again.
    pub async fn readmissions_ready(&self) {
        self.readmit.notified().await
    }

    /// The deferred pods to fetch again: namespace, name and uid.
    pub fn take_readmissions(&self) -> Vec<(String, String, String)> {
        std::mem::take(&mut self.lock().to_readmit)
    }

    /// Bytes held by `namespace`'s waiting pods, and how many pods of it are deferred.
    pub fn usage(&self, namespace: &str) -> (usize, usize) {
        let inner = self.lock();
        (inner.held.get(namespace).copied().unwrap_or(0), inner.deferred.get(namespace).map_or(0, BTreeMap::len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_past_its_budget_defers_pods_and_readmits_them_as_room_frees() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        assert_eq!(budget.admit("noisy", "a", 60), Ok(()));
        assert_eq!(budget.admit("noisy", "a", 70), Ok(()), "the same pod grown: counted once");
        assert!(budget.admit("noisy", "b", 40).unwrap_err().contains("namespace noisy hold the 0 KiB"));
        budget.defer("noisy", "b", "b", 40);
        budget.defer("noisy", "c", "c", 20);
        assert_eq!(budget.admit("quiet", "q", 90), Ok(()), "another namespace has its own budget");
        assert_eq!(budget.usage("noisy"), (70, 2));
        budget.release("q");
        assert!(budget.take_readmissions().is_empty(), "room in another namespace readmits nothing");
        budget.release("a");
        assert_eq!(budget.take_readmissions(), [("noisy".to_string(), "b".to_string(), "b".to_string()), ("noisy".to_string(), "c".to_string(), "c".to_string())]);
        assert_eq!(budget.usage("noisy"), (0, 0));
    }

    #[test]
    fn a_deferred_pod_deleted_is_forgotten_and_readmission_stops_at_the_room() {
        let budget = WaitingBudget::default();
        budget.set_limit(100);
        budget.admit("noisy", "a", 50).unwrap();
        budget.admit("noisy", "b", 50).unwrap();
        for (name, bytes) in [("c", 50), ("d", 50), ("e", 10)] {
            budget.defer("noisy", name, name, bytes);
        }
        budget.release("d");
        assert_eq!(budget.usage("noisy"), (100, 2));
        budget.release("a");
        let names: Vec<String> = budget.take_readmissions().into_iter().map(|(_, name, _)| name).collect();
        assert_eq!(names, ["c"], "50 bytes free: c fits, e waits its turn behind it");
    }
}
