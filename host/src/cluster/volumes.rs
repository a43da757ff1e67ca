//! What the scheduler knows of PersistentVolumeClaims, PersistentVolumes and StorageClasses, kept by informers,
//! and how a pod's claims resolve against them into the contract's claim requirements (kube-scheduler's
//! VolumeBinding PreFilter): where a bound volume can be attached, where a `WaitForFirstConsumer` claim may be
//! provisioned, or why no node will do. Only what that needs is kept of each object.
//!
//! A `WaitForFirstConsumer` claim without `volumeName` goes to an existing volume that fits it where the chosen
//! node can attach one (static binding: local volumes, pre-made disks; the smallest that fits, as kube-scheduler
//! picks), else it is provisioned there if its class has a provisioner. A claim with a `selector` takes only a
//! volume whose labels it selects and is never provisioned (provisioners refuse such claims; kube-scheduler finds
//! out only when its PreBind times out). `Immediate` claims are the PersistentVolume controller's.
//!
//! Each claim also resolves to what attaching its volume takes on a node (kube-scheduler's NodeVolumeLimits): the
//! bound volume's CSI driver and handle, or for a claim still to be provisioned its class's provisioner and the
//! placeholder handle `<namespace>-<claim>`.

use crate::contract::types::{AttachedVolume, ClaimRequirement, NodeSelectorTerm, Pod};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;
use tokio::sync::Notify;

/// Where the scheduler tells a provisioner which node a `WaitForFirstConsumer` claim's pod goes to.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PersistentVolume controller once claim and volume point at each other.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claim {
    /// `spec.volumeName`: bound, or pre-bound to this volume.
    pub volume: Option<String>,
    /// `spec.storageClassName`; unset is no class, as for kube-scheduler (the admission plugin and the
    /// PersistentVolume controller write the default class into claims that name none).
    pub class: Option<String>,
    /// Fully bound: a volume named and the PersistentVolume controller's `bind-completed` annotation.
    pub bound: bool,
    pub terminating: bool,
    /// `spec.resources.requests.storage` in bytes.
    pub request: u64,
    pub access_modes: Vec<String>,
    /// `spec.selector`: only a volume whose labels it selects may be given to the claim, and none is provisioned.
    pub selector: Option<wasp_sdk::types::LabelSelector>,
    /// `spec.volumeMode`, `Filesystem` when unset.
    pub volume_mode: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Volume {
    /// `spec.nodeAffinity.required` (ORed terms); None: attachable anywhere.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// `spec.storageClassName`, empty for none.
    pub class: String,
    /// `metadata.labels`, for the claims' selectors.
    pub labels: Vec<(String, String)>,
    /// `spec.capacity.storage` in bytes.
    pub capacity: u64,
    pub access_modes: Vec<String>,
    /// `spec.claimRef` as (namespace, name): taken, or pre-bound to that claim.
    pub claim: Option<(String, String)>,
    /// `spec.claimRef.uid`: empty when the claimRef names a claim by name only (pre-bound by hand).
    pub claim_uid: String,
    /// `status.phase`: `Released` and `Failed` volumes are given to nobody.
    pub phase: String,
    /// `spec.volumeMode`, `Filesystem` when unset.
    pub volume_mode: String,
    /// What the `claimRef` write is conditional on: a volume changed since it was read is not overwritten.
    pub resource_version: String,
    pub terminating: bool,
    /// `spec.csi`: the driver that attaches it and its handle; None for a volume no CSI driver attaches.
    pub csi: Option<AttachedVolume>,
}

/// A claim of a pod placed on a node, as Reserve left it: given an existing volume, or to be provisioned there.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservedClaim {
    pub claim: String,
    /// The volume given to it and the resource version it was read at.
    pub volume: Option<(String, String)>,
}

impl Volume {
    /// Whether a static binding may give this volume to `claim` (`namespace/name`), as the volume binder's
    /// `FindMatchingVolume` decides: free or pre-bound to it, same class, large enough, every access mode asked.
    fn fits(&self, namespace: &str, name: &str, claim: &Claim) -> bool {
        let usable = self.pre_bound_to(namespace, name, claim) || (self.claim.is_none() && !matches!(self.phase.as_str(), "Released" | "Failed"));
        usable
            && !self.terminating
            && claim.selector.as_ref().is_none_or(|selector| selector.matches(&self.labels))
            && self.class == claim.class.as_deref().unwrap_or_default()
            && self.volume_mode == claim.volume_mode
            && self.capacity >= claim.request
            && claim.access_modes.iter().all(|mode| self.access_modes.contains(mode))
    }

    /// Its `claimRef` names this claim: by name only, or with the claim's uid (a stale uid is an older claim's).
    fn pre_bound_to(&self, namespace: &str, name: &str, claim: &Claim) -> bool {
        self.claim.as_ref().is_some_and(|(owner_namespace, owner)| owner_namespace == namespace && owner == name)
            && (self.claim_uid.is_empty() || self.claim_uid == claim.uid)
    }
}

impl Claim {
    /// Whether `class` would provision a volume for this claim: it has a provisioner and the claim no selector.
    fn provisioned_by(&self, class: Option<&Class>) -> bool {
        self.selector.is_none() && class.is_some_and(|class| class.provisioned)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Class {
    pub wait_for_first_consumer: bool,
    /// Its claims are provisioned (not `kubernetes.io/no-provisioner`).
    pub provisioned: bool,
    /// `provisioner`: the CSI driver that makes, and will attach, its claims' volumes.
    pub provisioner: String,
    /// `allowedTopologies` as node selector terms (ORed); empty: anywhere.
    pub allowed_topologies: Vec<NodeSelectorTerm>,
}

#[derive(Default)]
struct Objects {
    /// By (namespace, name).
    claims: HashMap<(String, String), Claim>,
    volumes: HashMap<String, Volume>,
    classes: HashMap<String, Class>,
    /// Volumes this host gave a claim (its `claimRef` written) before the informer saw it: not given twice.
    assumed: HashMap<String, (String, String)>,
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
        let mut objects = self.write();
        if volume.claim.is_some() {
            objects.assumed.remove(name);
        }
        objects.volumes.insert(name.to_string(), volume.clone()) != Some(volume)
    }

    /// kube-scheduler's Reserve (`AssumePodVolumes`), in the scheduling cycle so the next pod sees it: each of
    /// a pod's waiting claims (smallest request first) gets the volume pre-bound to it, else the smallest free one
    /// that fits and that `node` can attach, assumed until the informer sees its `claimRef`; or none, to be
    /// provisioned, if its class provisions. Otherwise nothing is reserved and the reason is returned.
    pub fn reserve(&self, namespace: &str, claims: &[String], node: &crate::contract::types::Node) -> Result<Vec<ReservedClaim>, String> {
        let mut objects = self.write();
        let mut wanted: Vec<(&String, Claim)> = Vec::new();
        for name in claims {
            let claim = objects.claims.get(&(namespace.to_string(), name.clone())).ok_or_else(|| format!("persistentvolumeclaim {name:?} not found"))?;
            wanted.push((name, claim.clone()));
        }
        wanted.sort_by_key(|(_, claim)| claim.request);
        let mut reserved = Vec::new();
        for (name, claim) in wanted {
            let chosen = objects
                .volumes
                .iter()
                .filter(|(volume_name, volume)| {
                    volume.fits(namespace, name, &claim)
                        && objects.assumed.get(*volume_name).is_none_or(|owner| owner.0 == namespace && owner.1 == *name)
                        && volume.node_affinity.as_ref().is_none_or(|terms| terms.iter().any(|term| matches_node(term, node)))
                })
                .min_by_key(|(volume_name, volume)| (!volume.pre_bound_to(namespace, name, &claim), volume.capacity, (*volume_name).clone()))
                .map(|(volume_name, volume)| (volume_name.clone(), volume.resource_version.clone()));
            let provisioned = claim.provisioned_by(claim.class.as_deref().and_then(|class| objects.classes.get(class)));
            match chosen {
                Some((volume, version)) => {
                    objects.assumed.insert(volume.clone(), (namespace.to_string(), name.clone()));
                    reserved.push(ReservedClaim { claim: name.clone(), volume: Some((volume, version)) });
                }
                None if provisioned => reserved.push(ReservedClaim { claim: name.clone(), volume: None }),
                None => {
                    objects.unreserve(&reserved);
                    return Err(format!("no volume left for claim {name:?} on node {:?}: {BIND_CONFLICT_REASON}", node.name));
                }
            }
        }
        Ok(reserved)
    }

    /// Lets go of what [`VolumeObjects::reserve`] assumed (the pod was not bound).
    pub fn unreserve(&self, reserved: &[ReservedClaim]) {
        self.write().unreserve(reserved);
    }

    pub fn remove_volume(&self, name: &str) {
        let mut objects = self.write();
        objects.volumes.remove(name);
        objects.assumed.remove(name);
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
            claim.attachment = objects.attachment(&pod.namespace, &claim.name);
        }
        Ok(Some(resolved))
    }

    /// Sets what each of a bound pod's claims attaches to its node; returns whether that changed.
    pub fn attach(&self, pod: &mut Pod) -> bool {
        if pod.volume_claims.is_empty() {
            return false;
        }
        let objects = self.read();
        let mut changed = false;
        for claim in &mut pod.volume_claims {
            let attachment = objects.attachment(&pod.namespace, &claim.name);
            changed |= claim.attachment != attachment;
            claim.attachment = attachment;
        }
        changed
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
                                Some(Volume { node_affinity: Some(terms), .. }) if !terms.iter().any(|term| matches_node(term, node)) => {
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

/// kube-scheduler's reason for a node where a waiting claim can be neither given a volume nor provisioned.
const BIND_CONFLICT_REASON: &str = "node(s) didn't find available persistent volumes to bind";

impl Objects {
    fn unreserve(&mut self, reserved: &[ReservedClaim]) {
        for volume in reserved.iter().filter_map(|claim| claim.volume.as_ref()) {
            self.assumed.remove(&volume.0);
        }
    }

    /// What attaching the claim's volume takes, as kube-scheduler's NodeVolumeLimits counts it: the bound
    /// volume's `spec.csi`; for a claim not bound yet, a volume of its class's provisioner with the placeholder
    /// handle `<namespace>-<claim>`. None when no CSI driver attaches it (a volume without `spec.csi`, a claim
    /// whose volume or class is unknown).
    fn attachment(&self, namespace: &str, name: &str) -> Option<AttachedVolume> {
        let claim = self.claims.get(&(namespace.to_string(), name.to_string()))?;
        match &claim.volume {
            Some(volume) => self.volumes.get(volume)?.csi.clone(),
            None => {
                let class = self.classes.get(claim.class.as_deref()?)?;
                class.provisioned.then(|| AttachedVolume { driver: class.provisioner.clone(), handle: format!("{namespace}-{name}") })
            }
        }
    }

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
                Some(Volume { node_affinity: Some(terms), .. }) => ClaimRequirement::Bound(terms.clone()),
                Some(Volume { node_affinity: None, .. }) => ClaimRequirement::Anywhere,
                None => ClaimRequirement::Unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()),
            });
        }
        let Some(class) =
            claim.class.as_deref().filter(|name| !name.is_empty()).and_then(|name| self.classes.get(name)).filter(|class| class.wait_for_first_consumer)
        else {
            return Err("pod has unbound immediate PersistentVolumeClaims".into());
        };
        // The nodes a fitting volume can be attached to, and where the class may provision: the claim can be
        // met where either holds (an empty list of terms is anywhere).
        let fitting: Vec<&Volume> = self
            .volumes
            .iter()
            .filter(|(volume_name, volume)| {
                volume.fits(namespace, name, claim) && self.assumed.get(*volume_name).is_none_or(|owner| owner.0 == namespace && owner.1 == name)
            })
            .map(|(_, volume)| volume)
            .collect();
        let provisioned = claim.provisioned_by(Some(class));
        if fitting.iter().any(|volume| volume.node_affinity.is_none()) || (provisioned && class.allowed_topologies.is_empty()) {
            return Ok(ClaimRequirement::ToProvision(Vec::new()));
        }
        let mut terms: Vec<NodeSelectorTerm> = fitting.iter().flat_map(|volume| volume.node_affinity.iter().flatten().cloned()).collect();
        if provisioned {
            terms.extend(class.allowed_topologies.iter().cloned());
        }
        if terms.is_empty() {
            return Ok(ClaimRequirement::Unresolvable(BIND_CONFLICT_REASON.into()));
        }
        Ok(ClaimRequirement::ToProvision(terms))
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
        let mut pod: Pod = crate::cluster::convert::pod(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [{"name": "a"}]}
            }))
            .unwrap(),
        )
        .unwrap();
        pod.volume_claims =
            claims.iter().map(|name| VolumeClaim { name: name.to_string(), requirement: ClaimRequirement::Anywhere, attachment: None }).collect();
        pod
    }

    #[test]
    fn claims_resolve_as_kube_scheduler_reads_them() {
        let objects = VolumeObjects::default();
        let claim = |volume: Option<&str>, class: Option<&str>| Claim {
            volume: volume.map(str::to_string),
            class: class.map(str::to_string),
            bound: volume.is_some(),
            ..Claim::default()
        };
        objects.upsert_volume("zonal", Volume { node_affinity: Some(zone("a")), ..Volume::default() });
        objects.upsert_volume("anywhere", Volume { node_affinity: None, ..Volume::default() });
        objects.upsert_class("late", Class { wait_for_first_consumer: true, provisioned: true, allowed_topologies: zone("b"), ..Class::default() });
        objects.upsert_class("local", Class { wait_for_first_consumer: true, provisioned: false, allowed_topologies: Vec::new(), ..Class::default() });
        objects.upsert_class("eager", Class { wait_for_first_consumer: false, provisioned: true, allowed_topologies: Vec::new(), ..Class::default() });
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

    #[test]
    fn a_waiting_claim_goes_to_the_smallest_free_volume_that_fits_where_the_pod_goes() {
        let objects = VolumeObjects::default();
        let node = |name: &str, zone: &str| {
            crate::cluster::convert::node(
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}
                }))
                .unwrap(),
            )
            .unwrap()
        };
        let local = |zone_name: &str, gib: u64| Volume {
            node_affinity: Some(zone(zone_name)),
            class: "local".into(),
            capacity: gib << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: "Filesystem".into(),
            ..Volume::default()
        };
        objects.upsert_class("local", Class { wait_for_first_consumer: true, provisioned: false, allowed_topologies: Vec::new(), ..Class::default() });
        objects.upsert_volume("a-big", local("a", 100));
        objects.upsert_volume("a-fit", local("a", 10));
        objects.upsert_volume("a-small", local("a", 1));
        objects.upsert_volume("a-taken", Volume { claim: Some(("ns".into(), "other".into())), ..local("a", 10) });
        objects.upsert_volume("a-released", Volume { phase: "Released".into(), ..local("a", 10) });
        objects.upsert_volume("a-block", Volume { volume_mode: "Block".into(), ..local("a", 10) });
        objects.upsert_volume("a-other-class", Volume { class: "fast".into(), ..local("a", 10) });
        objects.upsert_volume("b-fit", local("b", 10));
        objects.upsert_volume("b-read-only", Volume { access_modes: vec!["ReadOnlyMany".into()], ..local("b", 10) });
        // Pre-bound to a claim of the same name that was deleted and made again: not this claim's.
        objects.upsert_volume("b-stale", Volume { claim: Some(("ns".into(), "first".into())), claim_uid: "old".into(), ..local("b", 10) });
        let wants = |uid: &str| Claim {
            class: Some("local".into()),
            request: 4 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: "Filesystem".into(),
            uid: uid.into(),
            ..Claim::default()
        };
        for name in ["first", "second", "third", "fourth"] {
            objects.upsert_claim("ns", name, wants(name));
        }
        // Where a fitting volume can be attached: zone a (twice) or zone b.
        let resolved = objects.resolved(&pod_with(&["first"])).unwrap().unwrap();
        let ClaimRequirement::ToProvision(terms) = &resolved.volume_claims[0].requirement else { panic!("{resolved:?}") };
        let mut zones: Vec<&str> = terms.iter().map(|term| term.match_expressions[0].values[0].as_str()).collect();
        zones.sort();
        assert_eq!(zones, ["a", "a", "b"]);
        // The smallest that fits on the chosen node, reserved in the cycle: the next pod does not get it too.
        let volume_of = |reserved: Result<Vec<ReservedClaim>, String>| reserved.map(|claims| claims[0].volume.clone().map(|(volume, _)| volume));
        let in_a = node("n-1", "a");
        assert_eq!(volume_of(objects.reserve("ns", &["first".into()], &in_a)), Ok(Some("a-fit".into())));
        assert_eq!(volume_of(objects.reserve("ns", &["second".into()], &in_a)), Ok(Some("a-big".into())));
        let nothing_left = objects.reserve("ns", &["third".into()], &in_a).unwrap_err();
        assert_eq!(nothing_left, "no volume left for claim \"third\" on node \"n-1\": node(s) didn't find available persistent volumes to bind");
        // Two claims of one pod never share a volume: the second finds none, and the first is let go.
        let in_b = node("n-2", "b");
        assert!(objects.reserve("ns", &["third".into(), "fourth".into()], &in_b).is_err());
        assert_eq!(volume_of(objects.reserve("ns", &["fourth".into()], &in_b)), Ok(Some("b-fit".into())));
        // A pod that was not bound lets its volumes go.
        let reserved = objects.reserve("ns", &["third".into()], &in_b);
        assert!(reserved.is_err(), "b-fit is the fourth's");
        objects.unreserve(&[ReservedClaim { claim: "fourth".into(), volume: Some(("b-fit".into(), String::new())) }]);
        assert_eq!(volume_of(objects.reserve("ns", &["third".into()], &in_b)), Ok(Some("b-fit".into())));
        // A volume pre-bound to the claim (by name) comes before a smaller free one.
        objects.upsert_volume("a-mine", Volume { claim: Some(("ns".into(), "fifth".into())), ..local("a", 50) });
        objects.upsert_volume("a-fit-2", local("a", 10));
        objects.upsert_claim("ns", "fifth", wants("fifth"));
        assert_eq!(volume_of(objects.reserve("ns", &["fifth".into()], &in_a)), Ok(Some("a-mine".into())));
    }

    #[test]
    fn a_claim_with_a_selector_takes_only_a_volume_it_selects_and_is_never_provisioned() {
        let objects = VolumeObjects::default();
        let node = crate::cluster::convert::node(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n-1", "labels": {"topology.kubernetes.io/zone": "a"}}
            }))
            .unwrap(),
        )
        .unwrap();
        let volume = |tier: &str, gib: u64| Volume {
            node_affinity: Some(zone("a")),
            class: "fast".into(),
            labels: vec![("tier".into(), tier.into())],
            capacity: gib << 30,
            volume_mode: "Filesystem".into(),
            ..Volume::default()
        };
        objects.upsert_class("fast", Class { wait_for_first_consumer: true, provisioned: true, allowed_topologies: zone("b"), ..Class::default() });
        objects.upsert_volume("hdd", volume("hdd", 5));
        objects.upsert_volume("ssd", volume("ssd", 10));
        let selector = wasp_sdk::types::LabelSelector { match_labels: vec![("tier".into(), "ssd".into())], match_expressions: Vec::new() };
        let claim = Claim { class: Some("fast".into()), request: 1 << 30, volume_mode: "Filesystem".into(), selector: Some(selector), ..Claim::default() };
        objects.upsert_claim("ns", "first", claim.clone());
        objects.upsert_claim("ns", "second", claim);
        // Where the selected volume is, not where the class provisions (zone b).
        let resolved = objects.resolved(&pod_with(&["first"])).unwrap().unwrap();
        assert_eq!(resolved.volume_claims[0].requirement, ClaimRequirement::ToProvision(zone("a")));
        let reserved = objects.reserve("ns", &["first".into()], &node).unwrap();
        assert_eq!(reserved[0].volume.as_ref().map(|(volume, _)| volume.as_str()), Some("ssd"), "not the smaller hdd");
        let resolved = objects.resolved(&pod_with(&["second"])).unwrap().unwrap();
        assert_eq!(resolved.volume_claims[0].requirement, ClaimRequirement::Unresolvable(BIND_CONFLICT_REASON.into()));
        assert!(objects.reserve("ns", &["second".into()], &node).is_err());
    }

    #[test]
    fn claims_attach_their_volumes_csi_handle_or_their_classs_placeholder() {
        let objects = VolumeObjects::default();
        let disk = |handle: &str| Some(AttachedVolume { driver: "disk.csi".into(), handle: handle.into() });
        objects.upsert_class("disks", Class { wait_for_first_consumer: true, provisioned: true, provisioner: "disk.csi".into(), ..Class::default() });
        objects.upsert_class(
            "local",
            Class { wait_for_first_consumer: true, provisioned: false, provisioner: "kubernetes.io/no-provisioner".into(), ..Class::default() },
        );
        objects.upsert_volume("pv-1", Volume { csi: disk("vol-1"), ..Volume::default() });
        objects.upsert_volume("nfs", Volume::default());
        objects.upsert_claim("ns", "bound", Claim { volume: Some("pv-1".into()), bound: true, ..Claim::default() });
        objects.upsert_claim("ns", "on-nfs", Claim { volume: Some("nfs".into()), bound: true, ..Claim::default() });
        objects.upsert_claim("ns", "waiting", Claim { class: Some("disks".into()), ..Claim::default() });
        objects.upsert_claim("ns", "local", Claim { class: Some("local".into()), ..Claim::default() });
        let mut pod = pod_with(&["bound", "on-nfs", "waiting", "local", "absent"]);
        assert!(objects.attach(&mut pod));
        let attachments: Vec<Option<AttachedVolume>> = pod.volume_claims.iter().map(|claim| claim.attachment.clone()).collect();
        assert_eq!(attachments, [disk("vol-1"), None, disk("ns-waiting"), None, None], "kube-scheduler's placeholder for a claim to provision");
        assert!(!objects.attach(&mut pod), "nothing changed");
        // Provisioned: the claim now names its real volume.
        objects.upsert_volume("pv-2", Volume { csi: disk("vol-2"), ..Volume::default() });
        objects.upsert_claim("ns", "waiting", Claim { class: Some("disks".into()), volume: Some("pv-2".into()), bound: true, ..Claim::default() });
        assert!(objects.attach(&mut pod));
        assert_eq!(pod.volume_claims[2].attachment, disk("vol-2"));
    }

    #[tokio::test]
    async fn waiting_for_a_claim_ends_when_it_is_bound_where_the_pod_goes() {
        let objects = std::sync::Arc::new(VolumeObjects::default());
        let node = crate::cluster::convert::node(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n", "labels": {"topology.kubernetes.io/zone": "a"}}
            }))
            .unwrap(),
        )
        .unwrap();
        let pending = Claim { class: Some("late".into()), ..Claim::default() };
        objects.upsert_claim("ns", "data", pending.clone());
        objects.upsert_volume("pv-a", Volume { node_affinity: Some(zone("a")), ..Volume::default() });
        objects.upsert_volume("pv-b", Volume { node_affinity: Some(zone("b")), ..Volume::default() });
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
