//! What the autoscaler reads of every pod, kept current by the pod informer so that a pass reads memory instead
//! of listing each namespace's pods from the API server: each live pod's labels and the facts the HPA's
//! `groupPods` looks at (phase, readiness and since when, start time, requests). Pods the HPA ignores (being
//! deleted, failed) are not kept. Read from the API objects themselves, so pods no scheduler waits for (gated,
//! unreadable by the scheduler's rules) are here too, as they are in the HPA's pod lister.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use wasp_sdk::quantity::parse_milli;

/// A pod as the autoscaler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledPod {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub pending: bool,
    /// Running and Ready.
    pub ready: bool,
    /// The Ready condition's last transition.
    pub ready_since: Option<Timestamp>,
    /// `status.startTime`.
    pub started: Option<Timestamp>,
    /// Requests summed over containers, in millicores and bytes; None if a container requests nothing.
    pub cpu_request: Option<f64>,
    pub memory_request: Option<f64>,
}

impl ScaledPod {
    /// None for pods the HPA ignores: being deleted, or failed (kube-controller-manager's `groupPods`).
    pub fn of(pod: &Pod) -> Option<ScaledPod> {
        let status = pod.status.as_ref();
        let phase = status.and_then(|status| status.phase.as_deref()).unwrap_or("Pending");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            return None;
        }
        let ready_condition = status.and_then(|status| status.conditions.as_ref()).into_iter().flatten().find(|condition| condition.type_ == "Ready");
        let spec = pod.spec.as_ref();
        // Requests of the app containers and of the sidecars (init containers that keep running), as
        // `calculatePodRequests` sums them; a container without the request leaves the pod without one.
        let sidecars =
            spec.and_then(|spec| spec.init_containers.as_ref()).into_iter().flatten().filter(|container| container.restart_policy.as_deref() == Some("Always"));
        let containers: Vec<&Container> = spec.map(|spec| spec.containers.as_slice()).unwrap_or_default().iter().chain(sidecars).collect();
        let request = |resource: &str, scale: f64| -> Option<f64> {
            containers
                .iter()
                .map(|container| {
                    let quantity = container.resources.as_ref()?.requests.as_ref()?.get(resource)?;
                    parse_milli(&quantity.0).ok().map(|milli| milli as f64 / 1000.0 * scale)
                })
                .sum()
        };
        Some(ScaledPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            pending: phase == "Pending",
            ready: phase == "Running" && ready_condition.is_some_and(|condition| condition.status == "True"),
            ready_since: ready_condition.and_then(|condition| condition.last_transition_time.as_ref()).map(|time| time.0),
            started: status.and_then(|status| status.start_time.as_ref()).map(|time| time.0),
            cpu_request: request("cpu", 1000.0),
            memory_request: request("memory", 1.0),
        })
    }
}

#[derive(Default)]
struct Index {
    /// By uid: (namespace, pod).
    pods: HashMap<String, (String, Arc<ScaledPod>)>,
    /// Uids by namespace.
    namespaces: HashMap<String, HashSet<String>>,
}

impl Index {
    fn remove(&mut self, uid: &str) {
        if let Some((namespace, _)) = self.pods.remove(uid) {
            if let Some(uids) = self.namespaces.get_mut(&namespace) {
                uids.remove(uid);
                if uids.is_empty() {
                    self.namespaces.remove(&namespace);
                }
            }
        }
    }
}

#[derive(Default)]
pub struct ScaledPods {
    index: RwLock<Index>,
}

impl ScaledPods {
    fn index(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A pod added or changed: kept, or dropped when the HPA ignores it.
    pub(super) fn observe(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut index = self.index();
        match ScaledPod::of(pod) {
            Some(scaled) => {
                let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                index.namespaces.entry(namespace.clone()).or_default().insert(uid.clone());
                index.pods.insert(uid, (namespace, Arc::new(scaled)));
            }
            None => index.remove(&uid),
        }
    }

    pub(super) fn forget(&self, uid: &str) {
        self.index().remove(uid);
    }

    /// Keeps only the pods a relist named (`listed` uids): one deleted while the watch was down goes.
    pub(super) fn retain_listed(&self, listed: &HashSet<String>) {
        let mut index = self.index();
        let gone: Vec<String> = index.pods.keys().filter(|uid| !listed.contains(*uid)).cloned().collect();
        for uid in gone {
            index.remove(&uid);
        }
    }

    /// The pods of `namespace` now.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<ScaledPod>> {
        let index = self.index.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        index.namespaces.get(namespace).into_iter().flatten().filter_map(|uid| index.pods.get(uid)).map(|(_, pod)| pod.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, namespace: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": namespace, "uid": uid, "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}}],
                "initContainers": [
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}}},
                    {"name": "setup", "resources": {"requests": {"cpu": "4"}}}
                ]
            },
            "status": {"phase": phase, "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:30Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_reads_as_the_hpa_groups_it() {
        let running = ScaledPod::of(&pod("a", "d", "Running")).unwrap();
        assert!(running.ready && !running.pending);
        assert_eq!((running.cpu_request, running.memory_request), (Some(250.0), Some(80.0 * 1024.0 * 1024.0)), "app and sidecar, not the init container");
        assert_eq!(running.ready_since, Some("2026-01-01T00:00:30Z".parse().unwrap()));
        assert_eq!(running.started, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        assert!(ScaledPod::of(&pod("a", "d", "Pending")).unwrap().pending);
        assert!(ScaledPod::of(&pod("a", "d", "Failed")).is_none());
        assert!(ScaledPod::of(&pod("a", "d", "Succeeded")).is_some(), "upstream counts it (it has no metrics: a missing pod)");
        let mut deleted = pod("a", "d", "Running");
        deleted.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::clock::now()));
        assert!(ScaledPod::of(&deleted).is_none());
        let mut no_request = pod("a", "d", "Running");
        no_request.spec.as_mut().unwrap().containers.push(Container { name: "bare".into(), ..Default::default() });
        assert_eq!(ScaledPod::of(&no_request).unwrap().cpu_request, None, "a container without the request leaves the pod without one");
    }

    #[test]
    fn the_index_follows_adds_changes_deletions_and_relists() {
        let pods = ScaledPods::default();
        pods.observe(&pod("a", "d", "Running"));
        pods.observe(&pod("b", "d", "Pending"));
        pods.observe(&pod("c", "other", "Running"));
        assert_eq!(pods.in_namespace("d").len(), 2);
        pods.observe(&pod("b", "d", "Failed"));
        assert_eq!(pods.in_namespace("d").iter().map(|pod| pod.name.as_str()).collect::<Vec<_>>(), ["a"], "a failed pod is dropped");
        pods.forget("a");
        assert!(pods.in_namespace("d").is_empty());
        pods.observe(&pod("a", "d", "Running"));
        pods.retain_listed(&HashSet::from(["c".to_string()]));
        assert!(pods.in_namespace("d").is_empty(), "gone at the relist");
        assert_eq!(pods.in_namespace("other").len(), 1);
    }
}
