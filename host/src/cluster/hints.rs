//! Placement hints: where the rescheduler wants the replacement of a pod it evicted to go. Kept per workload
//! (the controller that recreates the pod), consumed by that workload's next pod the scheduler binds, and
//! forgotten after [`HINT_TTL`] so a hint never holds a workload for long.

use crate::contract::types::{Placement, Pod};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
// tokio's clock: pacing and backoff follow simulated time under `wasp simulate` (see `crate::clock`).
use tokio::time::Instant;

/// How long a hint waits for its workload's next pod.
pub const HINT_TTL: Duration = Duration::from_secs(300);

/// The controller that recreates a pod: pacing, limits and hints count by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl Workload {
    pub fn of(pod: &Pod) -> Option<Workload> {
        let owner = pod.owner.as_ref().filter(|owner| owner.controller)?;
        Some(Workload { namespace: pod.namespace.clone(), kind: owner.kind.clone(), name: owner.name.clone() })
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[derive(Default)]
pub struct PlacementHints {
    hints: Mutex<HashMap<Workload, VecDeque<(Placement, Instant)>>>,
}

impl PlacementHints {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Workload, VecDeque<(Placement, Instant)>>> {
        self.hints.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next pod of `workload` should go where `placement` says.
    pub fn add(&self, workload: Workload, placement: Placement) {
        self.lock().entry(workload).or_default().push_back((placement, Instant::now() + HINT_TTL));
    }

    /// An eviction that `add`ed `placement` did not happen: its replacement will not come.
    pub fn withdraw(&self, workload: &Workload, placement: &Placement) {
        let mut hints = self.lock();
        if let Some(queue) = hints.get_mut(workload) {
            if let Some(position) = queue.iter().rposition(|(queued, _)| queued == placement) {
                queue.remove(position);
            }
            if queue.is_empty() {
                hints.remove(workload);
            }
        }
    }

    /// The hint for `pod`'s workload, if one is live.
    pub fn for_pod(&self, pod: &Pod) -> Option<Placement> {
        let workload = Workload::of(pod)?;
        let mut hints = self.lock();
        let queue = hints.get_mut(&workload)?;
        queue.retain(|(_, expires)| *expires > Instant::now());
        let hint = queue.front().map(|(placement, _)| placement.clone());
        if queue.is_empty() {
            hints.remove(&workload);
        }
        hint
    }

    /// `pod` was bound: its workload's oldest hint is used up.
    pub fn consumed_by(&self, pod: &Pod) {
        let Some(workload) = Workload::of(pod) else { return };
        let mut hints = self.lock();
        if let Some(queue) = hints.get_mut(&workload) {
            queue.pop_front();
            if queue.is_empty() {
                hints.remove(&workload);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn replica(name: &str) -> Pod {
        let source = serde_json::json!({"metadata": {"name": name, "namespace": "d", "uid": name,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
            "spec": {"containers": []}});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn a_withdrawn_hint_leaves_the_others_of_its_workload_in_order() {
        let hints = PlacementHints::default();
        let workload = Workload::of(&replica("a")).unwrap();
        hints.add(workload.clone(), Placement::PreferredNode("n-1".into()));
        hints.add(workload.clone(), Placement::PreferredNode("n-2".into()));
        hints.withdraw(&workload, &Placement::PreferredNode("n-2".into()));
        assert_eq!(hints.for_pod(&replica("b")), Some(Placement::PreferredNode("n-1".into())));
        hints.consumed_by(&replica("b"));
        assert_eq!(hints.for_pod(&replica("c")), None, "the withdrawn eviction has no replacement to guide");
    }
}
