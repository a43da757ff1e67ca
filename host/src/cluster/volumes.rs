//! What the scheduler knows of PersistentVolumeClaims, PersistentVolumes and StorageClasses, kept by informers,
//! and how a pod's claims resolve against them into the contract's claim requirements (kube-scheduler's
//! VolumeBinding PreFilter): where a bound volume can be attached, where a `WaitForFirstConsumer` claim may be
//! provisioned, or why no node will do. Only what that needs is kept of each object.
//!
//! Claims without `volumeName` are provisioned (dynamic provisioning); matching them to existing unclaimed volumes
//! (static binding) is not done.

use crate::contract::types::{ClaimRequirement, NodeSelectorTerm, Pod};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;
use tokio::sync::Notify;

/// Where the scheduler tells a provisioner which node a `WaitForFirstConsumer` claim's pod goes to.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// `spec.volumeName`: bound, or pre-bound to this volume.
    pub volume: Option<String>,
    /// `spec.storageClassName`: None uses the default class, `""` none.
    pub class: Option<String>,
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
    /// `allowedTopologies` as node selector terms (ORed); empty: anywhere.
    pub allowed_topologies: Vec<NodeSelectorTerm>,
    pub default: bool,
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

    /// `pod` with its claims resolved, or None when it has none (the common case: no copy).
    pub fn resolved(&self, pod: &Pod) -> Option<Pod> {
        if pod.volume_claims.is_empty() {
            return None;
        }
        let objects = self.read();
        let mut resolved = pod.clone();
        for claim in &mut resolved.volume_claims {
            claim.requirement = objects.requirement(&pod.namespace, &claim.name);
        }
        Some(resolved)
    }

    /// Waits until the claim is bound (a provisioner made its volume), at most `timeout`.
    pub async fn wait_bound(&self, namespace: &str, name: &str, timeout: Duration) -> Result<(), String> {
        let key = (namespace.to_string(), name.to_string());
        let wait = async {
            loop {
                // Registered before the check, so a change between the check and the wait is not missed.
                let changed = self.changed.notified();
                match self.read().claims.get(&key) {
                    Some(claim) if claim.bound => return Ok(()),
                    Some(_) => {}
                    None => return Err(format!("persistentvolumeclaim {name:?} not found")),
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or_else(|_| Err("timed out waiting for the condition".into()))
    }
}

impl Objects {
    /// kube-scheduler's VolumeBinding reasons, worded as it words them.
    fn requirement(&self, namespace: &str, name: &str) -> ClaimRequirement {
        let Some(claim) = self.claims.get(&(namespace.to_string(), name.to_string())) else {
            return ClaimRequirement::Unresolvable(format!("persistentvolumeclaim {name:?} not found"));
        };
        if claim.terminating {
            return ClaimRequirement::Unresolvable(format!("persistentvolumeclaim {name:?} is being deleted"));
        }
        if let Some(volume) = &claim.volume {
            return match self.volumes.get(volume) {
                Some(Volume { node_affinity: Some(terms) }) => ClaimRequirement::Bound(terms.clone()),
                Some(Volume { node_affinity: None }) => ClaimRequirement::Anywhere,
                None => ClaimRequirement::Unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()),
            };
        }
        let class = match &claim.class {
            Some(name) if name.is_empty() => None,
            Some(name) => self.classes.get(name),
            None => self.classes.values().find(|class| class.default),
        };
        match class {
            Some(class) if class.wait_for_first_consumer => ClaimRequirement::ToProvision(class.allowed_topologies.clone()),
            _ => ClaimRequirement::Unresolvable("pod has unbound immediate PersistentVolumeClaims".into()),
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
        objects.upsert_class("late", Class { wait_for_first_consumer: true, allowed_topologies: zone("b"), default: false });
        objects.upsert_class("eager", Class { wait_for_first_consumer: false, allowed_topologies: Vec::new(), default: true });
        objects.upsert_claim("ns", "on-zonal", claim(Some("zonal"), None));
        objects.upsert_claim("ns", "on-anywhere", claim(Some("anywhere"), None));
        objects.upsert_claim("ns", "on-missing", claim(Some("gone"), None));
        objects.upsert_claim("ns", "late", claim(None, Some("late")));
        objects.upsert_claim("ns", "default-class", claim(None, None));
        objects.upsert_claim("ns", "no-class", claim(None, Some("")));
        assert!(objects.resolved(&pod_with(&[])).is_none());
        let names = ["on-zonal", "on-anywhere", "on-missing", "late", "default-class", "no-class", "absent"];
        let resolved = objects.resolved(&pod_with(&names)).unwrap();
        let requirements: Vec<ClaimRequirement> = resolved.volume_claims.into_iter().map(|claim| claim.requirement).collect();
        let unbound_immediate = ClaimRequirement::Unresolvable("pod has unbound immediate PersistentVolumeClaims".into());
        assert_eq!(
            requirements,
            vec![
                ClaimRequirement::Bound(zone("a")),
                ClaimRequirement::Anywhere,
                ClaimRequirement::Unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()),
                ClaimRequirement::ToProvision(zone("b")),
                unbound_immediate.clone(),
                unbound_immediate,
                ClaimRequirement::Unresolvable("persistentvolumeclaim \"absent\" not found".into()),
            ]
        );
    }

    #[tokio::test]
    async fn waiting_for_a_claim_ends_when_it_is_bound() {
        let objects = std::sync::Arc::new(VolumeObjects::default());
        let pending = Claim { volume: None, class: Some("late".into()), bound: false, terminating: false };
        objects.upsert_claim("ns", "data", pending.clone());
        let waiter = tokio::spawn({
            let objects = objects.clone();
            async move { objects.wait_bound("ns", "data", Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        objects.upsert_claim("ns", "data", Claim { volume: Some("pv".into()), bound: true, ..pending });
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(objects.wait_bound("ns", "other", Duration::from_secs(1)).await, Err("persistentvolumeclaim \"other\" not found".into()));
    }
}
