//! What the scheduler knows of PersistentVolumeClaims, PersistentVolumes and StorageClasses, kept by informers,
//! and how a pod's claims resolve against them into the contract's claim requirements (kube-scheduler's
//! VolumeBinding PreFilter): where a bound volume can be attached, where a `WaitForFirstConsumer` claim may be
//! provisioned, or why no node will do. Only what that needs is kept of each object.
//!
//! Claims without `volumeName` are provisioned (dynamic provisioning); matching them to existing unclaimed volumes
//! (static binding) is not done, so a `WaitForFirstConsumer` claim of a class without a provisioner
//! (`kubernetes.io/no-provisioner`, local volumes) finds no volume on any node.

use crate::contract::types::{ClaimRequirement, NodeSelectorTerm, Pod};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;
use tokio::sync::Notify;

/// Where the scheduler tells a provisioner which node a `WaitForFirstConsumer` claim's pod goes to.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PersistentVolume controller once claim and volume point at each other.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// `spec.volumeName`: bound, or pre-bound to this volume.
    pub volume: Option<String>,
    /// `spec.storageClassName`; unset is no class, as for kube-scheduler (the admission plugin and the
    /// PersistentVolume controller write the default class into claims that name none).
    pub class: Option<String>,
    /// Fully bound: a volume named and the PersistentVolume controller's `bind-completed` annotation.
    pub bound: bool,
    pub terminating: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Volume {
    /// `spec.nodeAffinity.required` (ORed terms); None: attachable anywhere.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub wait_for_first_consumer: bool,
    /// Its claims are provisioned (not `kubernetes.io/no-provisioner`).
    pub provisioned: bool,
    /// `allowedTopologies` as node selector terms (ORed); empty: anywhere.
    pub allowed_topologies: Vec<NodeSelectorTerm>,
}

#[derive(Default)]
struct Objects {
    /// By (namespace, name).
    claims: HashMap<(String, String), Claim>,
    volumes: HashMap<String, Volume>,
    classes: HashMap<String, Class>,
}

/// The volume objects the informers keep, and a signal for those waiting for a claim to be bound.
#[derive(Default)]
pub struct VolumeObjects {
    objects: RwLock<Objects>,
    changed: Notify,
    /// Kinds the host may not list (a 403), with the API server's message: pods with claims wait.
    unreadable: std::sync::Mutex<std::collections::BTreeMap<&'static str, String>>,
}

impl VolumeObjects {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects> {
        self.objects.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects> {
        self.objects.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Returns whether anything changed.
    pub fn upsert_claim(&self, namespace: &str, name: &str, claim: Claim) -> bool {
        let changed = self.write().claims.insert((namespace.to_string(), name.to_string()), claim.clone()) != Some(claim);
        self.changed.notify_waiters();
        changed
    }

    pub fn remove_claim(&self, namespace: &str, name: &str) {
        self.write().claims.remove(&(namespace.to_string(), name.to_string()));
        self.changed.notify_waiters();
    }

    pub fn upsert_volume(&self, name: &str, volume: Volume) -> bool {
        self.write().volumes.insert(name.to_string(), volume.clone()) != Some(volume)
    }

    pub fn remove_volume(&self, name: &str) {
        self.write().volumes.remove(name);
    }

    pub fn upsert_class(&self, name: &str, class: Class) -> bool {
        self.write().classes.insert(name.to_string(), class.clone()) != Some(class)
    }

    pub fn remove_class(&self, name: &str) {
        self.write().classes.remove(name);
    }

    /// Keeps only the objects a relist found (`claims` as `namespace/name`).
    pub fn retain_claims(&self, listed: &std::collections::HashSet<String>) {
        self.write().claims.retain(|(namespace, name), _| listed.contains(&format!("{namespace}/{name}")));
        self.changed.notify_waiters();
    }

    pub fn retain_volumes(&self, listed: &std::collections::HashSet<String>) {
        self.write().volumes.retain(|name, _| listed.contains(name));
    }

    pub fn retain_classes(&self, listed: &std::collections::HashSet<String>) {
        self.write().classes.retain(|name, _| listed.contains(name));
    }

    /// Records (`Some(message)`) or clears that the host may not list `kind`.
    pub fn set_unreadable(&self, kind: &'static str, message: Option<String>) {
        let mut unreadable = self.unreadable.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let changed = match message {
            Some(message) => unreadable.insert(kind, message).is_none(),
            None => unreadable.remove(kind).is_some(),
        };
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// `pod` with its claims resolved (None when it has none: the common case, no copy), or kube-scheduler's
    /// PreFilter reason why no node can take it (`persistentvolumeclaim "data" not found`), which
    /// kube-scheduler reports once, not per node.
    pub fn resolved(&self, pod: &Pod) -> Result<Option<Pod>, String> {
        if pod.volume_claims.is_empty() {
            return Ok(None);
        }
        if let Some((kind, message)) = self.unreadable.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().next() {
            return Err(format!("the scheduler cannot read {kind}: {message}"));
        }
        let objects = self.read();
        let mut resolved = pod.clone();
        for claim in &mut resolved.volume_claims {
            claim.requirement = objects.requirement(&pod.namespace, &claim.name)?;
        }
        Ok(Some(resolved))
    }

    /// Waits until the claim is bound (a provisioner made its volume) to a volume `node` can attach, at most
    /// `timeout` (kube-scheduler's PreBind `checkBindings`).
    pub async fn wait_bound(&self, namespace: &str, name: &str, node: &crate::contract::types::Node, timeout: Duration) -> Result<(), String> {
        let key = (namespace.to_string(), name.to_string());
        let wait = async {
            loop {
                // Registered before the check, so a change between the check and the wait is not missed.
                let changed = self.changed.notified();
                {
                    let objects = self.read();
                    match objects.claims.get(&key) {
                        Some(Claim { bound: true, volume: Some(volume), .. }) => {
                            return match objects.volumes.get(volume) {
                                Some(Volume { node_affinity: Some(terms) }) if !terms.iter().any(|term| matches_node(term, node)) => {
                                    Err(format!("pv {volume:?} node affinity doesn't match node {:?}", node.name))
                                }
                                // Not seen yet: the claim's informer was first; the next change says more.
                                None => Ok(()),
                                Some(_) => Ok(()),
                            };
                        }
                        Some(_) => {}
                        None => return Err(format!("persistentvolumeclaim {name:?} not found")),
                    }
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or_else(|_| Err("timed out waiting for the condition".into()))
    }
}

/// The SDK's node selector term rule (the one policies use), on the host's records.
fn matches_node(term: &NodeSelectorTerm, node: &crate::contract::types::Node) -> bool {
    // The host's and the SDK's records are generated from the same WIT records: the fields map one to one.
    fn sdk<T: serde::de::DeserializeOwned>(value: &impl serde::Serialize) -> Option<T> {
        serde_json::to_value(value).and_then(serde_json::from_value).ok()
    }
    match (sdk::<wasp_sdk::types::NodeSelectorTerm>(term), sdk::<wasp_sdk::types::Node>(node)) {
        (Some(term), Some(node)) => term.matches(&node),
        _ => false,
    }
}

impl Objects {
    /// kube-scheduler's VolumeBinding, worded as it words its reasons: `Err` for its PreFilter's (the pod as a
    /// whole), `Unresolvable` for its Filter's (counted per node).
    fn requirement(&self, namespace: &str, name: &str) -> Result<ClaimRequirement, String> {
        let Some(claim) = self.claims.get(&(namespace.to_string(), name.to_string())) else {
            return Err(format!("persistentvolumeclaim {name:?} not found"));
        };
        if claim.terminating {
            return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
        }
        if let (true, Some(volume)) = (claim.bound, &claim.volume) {
            return Ok(match self.volumes.get(volume) {
                Some(Volume { node_affinity: Some(terms) }) => ClaimRequirement::Bound(terms.clone()),
                Some(Volume { node_affinity: None }) => ClaimRequirement::Anywhere,
                None => ClaimRequirement::Unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()),
            });
        }
        match claim.class.as_deref().filter(|name| !name.is_empty()).and_then(|name| self.classes.get(name)) {
            Some(class) if class.wait_for_first_consumer && class.provisioned => Ok(ClaimRequirement::ToProvision(class.allowed_topologies.clone())),
            Some(class) if class.wait_for_first_consumer => Ok(ClaimRequirement::Unresolvable("node(s) didn't find available persistent volumes to bind".into())),
            _ => Err("pod has unbound immediate PersistentVolumeClaims".into()),
        }
    }
}

/// The claims of a pod placed on a node that wait for it: provisioned once the scheduler names the node.
pub fn to_provision(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.volume_claims.iter().filter(|claim| matches!(claim.requirement, ClaimRequirement::ToProvision(_))).map(|claim| claim.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::types::{SelectorOperator, SelectorRequirement, VolumeClaim};

    fn zone(zone: &str) -> Vec<NodeSelectorTerm> {
        let requirement = SelectorRequirement { key: "topology.kubernetes.io/zone".into(), operator: SelectorOperator::In, values: vec![zone.into()] };
        vec![NodeSelectorTerm { match_expressions: vec![requirement], match_fields: Vec::new() }]
    }

    fn pod_with(claims: &[&str]) -> Pod {
        let mut pod: Pod = crate::cluster::convert::pod(&serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [{"name": "a"}]}
        })).unwrap()).unwrap();
        pod.volume_claims = claims.iter().map(|name| VolumeClaim { name: name.to_string(), requirement: ClaimRequirement::Anywhere }).collect();
        pod
    }

    #[test]
    fn claims_resolve_as_kube_scheduler_reads_them() {
        let objects = VolumeObjects::default();
        let claim = |volume: Option<&str>, class: Option<&str>| Claim { volume: volume.map(str::to_string), class: class.map(str::to_string), bound: volume.is_some(), terminating: false };
        objects.upsert_volume("zonal", Volume { node_affinity: Some(zone("a")) });
        objects.upsert_volume("anywhere", Volume { node_affinity: None });
        objects.upsert_class("late", Class { wait_for_first_consumer: true, provisioned: true, allowed_topologies: zone("b") });
        objects.upsert_class("local", Class { wait_for_first_consumer: true, provisioned: false, allowed_topologies: Vec::new() });
        objects.upsert_class("eager", Class { wait_for_first_consumer: false, provisioned: true, allowed_topologies: Vec::new() });
        objects.upsert_claim("ns", "on-zonal", claim(Some("zonal"), None));
        objects.upsert_claim("ns", "on-anywhere", claim(Some("anywhere"), None));
        objects.upsert_claim("ns", "on-missing", claim(Some("gone"), None));
        objects.upsert_claim("ns", "late", claim(None, Some("late")));
        objects.upsert_claim("ns", "local", claim(None, Some("local")));
        // Named but not fully bound (no bind-completed yet): unbound, as kube-scheduler reads it.
        objects.upsert_claim("ns", "pre-bound", Claim { bound: false, ..claim(Some("zonal"), Some("late")) });
        objects.upsert_claim("ns", "eager", claim(None, Some("eager")));
        objects.upsert_claim("ns", "no-class", claim(None, None));
        assert_eq!(objects.resolved(&pod_with(&[])), Ok(None));
        let names = ["on-zonal", "on-anywhere", "on-missing", "late", "local", "pre-bound"];
        let resolved = objects.resolved(&pod_with(&names)).unwrap().unwrap();
        let requirements: Vec<ClaimRequirement> = resolved.volume_claims.into_iter().map(|claim| claim.requirement).collect();
        assert_eq!(
            requirements,
            vec![
                ClaimRequirement::Bound(zone("a")),
                ClaimRequirement::Anywhere,
                ClaimRequirement::Unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()),
                ClaimRequirement::ToProvision(zone("b")),
                ClaimRequirement::Unresolvable("node(s) didn't find available persistent volumes to bind".into()),
                ClaimRequirement::ToProvision(zone("b")),
            ]
        );
        // kube-scheduler's PreFilter reasons: about the pod, not per node.
        let unbound_immediate = Err("pod has unbound immediate PersistentVolumeClaims".to_string());
        assert_eq!(objects.resolved(&pod_with(&["eager"])), unbound_immediate);
        assert_eq!(objects.resolved(&pod_with(&["no-class"])), unbound_immediate, "a claim naming no class has none");
        assert_eq!(objects.resolved(&pod_with(&["late", "absent"])), Err("persistentvolumeclaim \"absent\" not found".to_string()));
    }

    #[tokio::test]
    async fn waiting_for_a_claim_ends_when_it_is_bound_where_the_pod_goes() {
        let objects = std::sync::Arc::new(VolumeObjects::default());
        let node = crate::cluster::convert::node(&serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": {"topology.kubernetes.io/zone": "a"}}
        })).unwrap()).unwrap();
        let pending = Claim { volume: None, class: Some("late".into()), bound: false, terminating: false };
        objects.upsert_claim("ns", "data", pending.clone());
        objects.upsert_volume("pv-a", Volume { node_affinity: Some(zone("a")) });
        objects.upsert_volume("pv-b", Volume { node_affinity: Some(zone("b")) });
        let waiter = tokio::spawn({
            let (objects, node) = (objects.clone(), node.clone());
            async move { objects.wait_bound("ns", "data", &node, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        objects.upsert_claim("ns", "data", Claim { volume: Some("pv-a".into()), bound: true, ..pending.clone() });
        assert_eq!(waiter.await.unwrap(), Ok(()));
        objects.upsert_claim("ns", "elsewhere", Claim { volume: Some("pv-b".into()), bound: true, ..pending });
        let wrong_zone = objects.wait_bound("ns", "elsewhere", &node, Duration::from_secs(1)).await;
        assert_eq!(wrong_zone, Err("pv \"pv-b\" node affinity doesn't match node \"n\"".into()));
        assert_eq!(objects.wait_bound("ns", "other", &node, Duration::from_secs(1)).await, Err("persistentvolumeclaim \"other\" not found".into()));
    }
}
