//! [`ClusterState`]: nodes and the pods bound to them, with per-node usage totals, and an append-only log of
//! [`ClusterDelta`]s. Each policy instance remembers the log it follows (the state's epoch) and the position it
//! has applied; [`ClusterState::sync`] sends it what it missed (only node deltas to instances whose view is
//! nodes-only), or a full snapshot if it fell behind the retained part of the log or followed another log.
//!
//! [`ClusterState::fork`] makes a what-if copy with its own epoch: the rescheduler and preemption change it
//! ("without these pods, would that one fit?") while the live state goes on, and a pooled instance used on both
//! is never fed deltas from the wrong log.

use super::selected::named_keys;
use super::{SelectedKeys, View};
use crate::contract::types::{AttachedVolume, ClusterDelta, Node, NodeId, NodeUsage, Pod, PodId, PodPlace, Resources, ViewScope};
use crate::contract::FailedPod;
use crate::shrink::ShrinkWhenSparse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wasp_sdk::resources::ResourceVector;

/// Epochs are unique in the process: two states never share one, so a position is only ever read in its own log.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

fn next_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, Ordering::Relaxed)
}

/// Where a delta sink stands: the log it follows (a state's epoch) and the position it has applied up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPoint {
    pub epoch: u64,
    pub position: u64,
}

/// The way back from a fork to the state it was taken from: the deltas that undo what the fork changed. A sink
/// that followed a fork keeps it, so the next sync with the original state costs a few deltas, not a snapshot of
/// every pod (the rescheduler's fit check forks the cluster on every run).
#[derive(Debug, Clone, PartialEq)]
pub struct Rewind {
    /// Where the sink stands once the deltas are applied: the original state's log at the fork.
    pub to: SyncPoint,
    pub deltas: Vec<ClusterDelta>,
}

/// What a fork overwrote, captured at its first change of each pod and node.
#[derive(Clone)]
struct Origin {
    /// The original state's log and head when the fork was taken.
    parent: SyncPoint,
    /// Bound pods as they were (None: the fork added the pod).
    pods: HashMap<PodId, Option<(NodeId, Pod)>>,
    usage: HashMap<NodeId, NodeUsage>,
    /// False once the fork changed what the way back does not cover (nodes, namespaces): sinks then get a
    /// snapshot, as without a way back.
    complete: bool,
}

/// What [`ClusterState::upsert_pod`] changed, so loops can tell a binding from a status update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodChange {
    Unchanged,
    /// The pod is newly on this node (first seen bound, or moved).
    Bound,
    /// The pod stays where it is; something policies see changed (readiness, restarts, labels, ...).
    Updated {
        labels_changed: bool,
        requests_changed: bool,
    },
}

/// Deltas per `apply` call, and their approximate bytes: bounds the time of one call (it stays well inside the
/// policy's deadline) and what one call copies into the guest, whatever the size of each pod.
const SYNC_CHUNK: usize = 1024;
const SYNC_CHUNK_BYTES: usize = 4 << 20;
/// Deltas kept for lagging instances, by count and by approximate bytes; one further behind gets a full resync.
/// Pod deltas carry whole pods, so a long log costs as much memory as the pods themselves: a few seconds of
/// binding traffic, and never more than the byte budget (tenants' pods with big label sets made 16k deltas weigh
/// hundreds of megabytes, kept after the pods were gone).
const RETAINED_DELTAS: usize = 16_384;
const RETAINED_BYTES: usize = 32 << 20;

/// Roughly what a delta costs in memory and to copy: its strings and a fixed share per record.
fn delta_bytes(delta: &ClusterDelta) -> usize {
    const RECORD: usize = 64;
    let pairs = |pairs: &[(String, String)]| pairs.iter().map(|(key, value)| key.len() + value.len() + RECORD).sum::<usize>();
    match delta {
        ClusterDelta::PodUpsert((_, _, pod)) => {
            RECORD * 8
                + pod.namespace.len()
                + pod.name.len()
                + pod.uid.len()
                + pairs(&pod.labels)
                + pairs(&pod.node_selector)
                + (pod.containers.len() + pod.init_containers.len()) * RECORD * 4
                + (pod.tolerations.len() + pod.topology_spread.len() + pod.host_ports.len()) * RECORD * 2
                + [&pod.pod_affinity, &pod.pod_anti_affinity]
                    .into_iter()
                    .flatten()
                    .map(|terms| (terms.required.len() + terms.preferred.len()) * RECORD * 4)
                    .sum::<usize>()
        }
        ClusterDelta::NamespaceUpsert((name, labels)) => RECORD + name.len() + pairs(labels),
        ClusterDelta::NodeUpsert((_, node, usage)) => {
            RECORD * 8 + node.name.len() + pairs(&node.labels) + node.taints.len() * RECORD * 2 + attached_bytes(usage)
        }
        ClusterDelta::NodeUsageUpdate((_, usage)) => RECORD + attached_bytes(usage),
        _ => RECORD,
    }
}

fn attached_bytes(usage: &NodeUsage) -> usize {
    usage.attached_volumes.iter().map(|volume| volume.driver.len() + volume.handle.len() + 64).sum()
}

#[derive(Default, Clone)]
struct Usage {
    requested: ResourceVector,
    non_zero_requested: ResourceVector,
    pod_count: u32,
    /// CSI volumes (driver, handle) the node's pods use, with how many pods use each.
    attached: BTreeMap<(String, String), u32>,
}

impl Usage {
    /// Whether a total reached the ceiling (absurd requests saturate, they do not wrap): subtraction can then no
    /// longer restore the true total, so the node's pods are summed again instead.
    fn saturated(&self) -> bool {
        [&self.requested, &self.non_zero_requested].into_iter().any(|total| {
            [total.cpu_millis, total.memory_bytes, total.ephemeral_storage_bytes].contains(&u64::MAX) || total.scalar.values().any(|value| *value == u64::MAX)
        })
    }

    fn to_contract(&self) -> NodeUsage {
        NodeUsage {
            requested: to_resources(&self.requested),
            non_zero_requested: to_resources(&self.non_zero_requested),
            pod_count: self.pod_count,
            attached_volumes: self.attached.keys().map(|(driver, handle)| AttachedVolume { driver: driver.clone(), handle: handle.clone() }).collect(),
        }
    }

    fn attach(&mut self, volumes: &[(String, String)]) {
        for volume in volumes {
            *self.attached.entry(volume.clone()).or_default() += 1;
        }
    }

    fn detach(&mut self, volumes: &[(String, String)]) {
        for volume in volumes {
            if let Some(users) = self.attached.get_mut(volume) {
                *users -= 1;
                if *users == 0 {
                    self.attached.remove(volume);
                }
            }
        }
    }
}

/// The CSI volumes a bound pod's claims attach to its node (resolved by `VolumeObjects::attach`).
fn attachments(pod: &Pod) -> Vec<(String, String)> {
    pod.volume_claims.iter().filter_map(|claim| claim.attachment.as_ref()).map(|volume| (volume.driver.clone(), volume.handle.clone())).collect()
}

pub fn to_resources(vector: &ResourceVector) -> Resources {
    Resources {
        cpu_millis: vector.cpu_millis,
        memory_bytes: vector.memory_bytes,
        ephemeral_storage_bytes: vector.ephemeral_storage_bytes,
        scalar: vector.scalar.iter().map(|(name, value)| (name.clone(), *value)).collect(),
    }
}

pub fn to_vector(resources: &Resources) -> ResourceVector {
    ResourceVector {
        cpu_millis: resources.cpu_millis,
        memory_bytes: resources.memory_bytes,
        ephemeral_storage_bytes: resources.ephemeral_storage_bytes,
        scalar: resources.scalar.iter().cloned().collect(),
    }
}

/// What a pod takes from its node, computed with the SDK's kube-scheduler arithmetic: its requests, and the same
/// with kube-scheduler's non-zero defaults for scoring.
pub fn pod_requests(pod: &Pod) -> (ResourceVector, ResourceVector) {
    let compute = |non_zero| {
        wasp_sdk::resources::effective_requests(
            pod.containers.iter().map(|container| to_vector(&container.requests)),
            pod.init_containers.iter().map(|container| wasp_sdk::resources::ContainerRequest {
                requests: to_vector(&container.requests),
                sidecar: pod.sidecar_init_containers.contains(&container.name),
            }),
            &to_vector(&pod.overhead),
            non_zero,
        )
    };
    (compute(false), compute(true))
}

/// A node name the state knows, from the node itself or from pods bound to it (informers deliver in any order).
#[derive(Clone)]
struct NodeSlot {
    id: NodeId,
    node: Option<Node>,
    usage: Usage,
    pods: BTreeSet<String>,
    /// From the node's CSINode, which may be seen before or after the node: merged into the node's record.
    volume_limits: Vec<(String, u32)>,
}

/// What the host knows of a pod beyond the contract record: facts only the host's own rules read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMeta {
    pub consent: EvictionConsent,
    /// The pod's `spec.resourceClaims` by name (devices through dynamic resource allocation): the host
    /// allocates no devices, so it neither binds such a pod nor moves one (see `cluster::convert::resource_claims`).
    pub resource_claims: Vec<String>,
    /// The pod group it names (`spec.schedulingGroup.podGroupName`): a gang's member is not evicted alone.
    pub pod_group: Option<String>,
}

/// The pod owner's word on eviction, from the annotation [`EVICT_ANNOTATION`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EvictionConsent {
    /// No annotation: the protections decide.
    #[default]
    Default,
    /// `never`: the rescheduler leaves the pod alone, whatever the policies say.
    Never,
    /// `allow`: the pod may be evicted even when a protection (local storage, bare pod, ...) would keep it.
    Allow,
    /// Another value; treated as `never`, and the plan says why.
    Unreadable(String),
}

pub const EVICT_ANNOTATION: &str = "wasp.dev/evict";

#[derive(Clone)]
struct BoundPod {
    id: PodId,
    node: String,
    pod: Pod,
    meta: PodMeta,
    requests: ResourceVector,
    non_zero_requests: ResourceVector,
}

pub struct ClusterState {
    slots: HashMap<String, NodeSlot>,
    /// Node names by id (ids are never reused).
    names: Vec<String>,
    /// Ids of the nodes present, kept ordered: every scheduling cycle asks for them.
    present: BTreeSet<NodeId>,
    /// Behind pointers, so the table (sized for the most pods ever bound) holds pointers, not records; shared, so
    /// that a fork (the rescheduler's what-if copy, every run) copies the table, not 50k records, and a record
    /// is copied only when one side changes it.
    pods: HashMap<String, Arc<BoundPod>>,
    /// Pod uids by id, for answers that name pods by id (evictions).
    uids: HashMap<PodId, String>,
    next_pod_id: PodId,
    /// Namespaces and their labels (pod affinity's namespace selectors read them).
    namespaces: BTreeMap<String, Vec<(String, String)>>,
    /// The label keys some pod's selectors name: the only labels views with `selected` labels receive.
    selected: SelectedKeys,
    /// Pods in phase Failed still on a node, by uid: they hold nothing, so they are in no view and no usage, but
    /// evict policies may clear them away (the descheduler's RemoveFailedPods). Ids from the same sequence.
    failed: HashMap<String, (FailedPod, PodMeta)>,
    /// For a fork: what it overwrote, the way back to its original.
    origin: Option<Origin>,
    /// Identifies this state's log among every state of the process.
    epoch: u64,
    log: VecDeque<ClusterDelta>,
    /// Approximate bytes of `log`.
    log_bytes: usize,
    /// Sequence number of `log[0]`.
    log_start: u64,
}

impl Default for ClusterState {
    fn default() -> Self {
        ClusterState {
            slots: HashMap::new(),
            names: Vec::new(),
            present: BTreeSet::new(),
            pods: HashMap::new(),
            uids: HashMap::new(),
            next_pod_id: 0,
            namespaces: BTreeMap::new(),
            selected: SelectedKeys::default(),
            failed: HashMap::new(),
            origin: None,
            epoch: next_epoch(),
            log: VecDeque::new(),
            log_bytes: 0,
            log_start: 0,
        }
    }
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// A what-if copy: the same nodes, pods and ids, its own epoch and an empty log. Changing it leaves this
    /// state alone. An instance synced to this state's head follows the fork with its deltas, and one that
    /// followed the fork comes back with the fork's [`Rewind`]; others get a snapshot.
    pub fn fork(&self) -> ClusterState {
        ClusterState {
            slots: self.slots.clone(),
            names: self.names.clone(),
            present: self.present.clone(),
            pods: self.pods.clone(),
            uids: self.uids.clone(),
            next_pod_id: self.next_pod_id,
            namespaces: self.namespaces.clone(),
            selected: self.selected.fork(),
            failed: self.failed.clone(),
            origin: Some(Origin {
                parent: SyncPoint { epoch: self.epoch, position: self.head() },
                pods: HashMap::new(),
                usage: HashMap::new(),
                complete: true,
            }),
            epoch: next_epoch(),
            log: VecDeque::new(),
            log_bytes: 0,
            log_start: 0,
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Sequence number the next delta will get: an instance synced to it is current.
    pub fn head(&self) -> u64 {
        self.log_start + self.log.len() as u64
    }

    /// Ids of the nodes present, in id order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.present.iter().copied().collect()
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.slots.get(name).filter(|slot| slot.node.is_some()).map(|slot| slot.id)
    }

    pub fn node_name(&self, id: NodeId) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }

    /// A node present, and what is placed on it.
    pub fn node(&self, id: NodeId) -> Option<(&Node, NodeUsage)> {
        let slot = self.slots.get(self.node_name(id)?)?;
        Some((slot.node.as_ref()?, slot.usage.to_contract()))
    }

    /// The bound pod with this id and its node's name.
    pub fn pod_by_id(&self, id: PodId) -> Option<(&Pod, &str)> {
        let bound = self.pods.get(self.uids.get(&id)?)?;
        Some((&bound.pod, bound.node.as_str()))
    }

    /// The bound pod with this uid and its node's name.
    pub fn pod(&self, uid: &str) -> Option<(&Pod, &str)> {
        self.pods.get(uid).map(|bound| (&bound.pod, bound.node.as_str()))
    }

    /// The id a bound pod has in views and answers.
    pub fn pod_id(&self, uid: &str) -> Option<PodId> {
        self.pods.get(uid).map(|bound| bound.id)
    }

    /// What the host knows of a bound pod beyond its record.
    pub fn pod_meta(&self, uid: &str) -> Option<&PodMeta> {
        self.pods.get(uid).map(|bound| &bound.meta)
    }

    /// Every bound pod with its node's name.
    pub fn bound_pods(&self) -> impl Iterator<Item = (&Pod, &str)> {
        self.pods.values().map(|bound| (&bound.pod, bound.node.as_str()))
    }

    /// The pods bound to `node`, by uid.
    pub fn pods_on(&self, node: &str) -> impl Iterator<Item = &Pod> {
        let uids = self.slots.get(node).map(|slot| &slot.pods);
        uids.into_iter().flatten().filter_map(|uid| self.pods.get(uid)).map(|bound| &bound.pod)
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Uids of every bound pod.
    pub fn pod_uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// Names of the nodes present.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.present.iter().filter_map(|id| self.node_name(*id))
    }

    fn slot(&mut self, name: &str) -> &mut NodeSlot {
        if !self.slots.contains_key(name) {
            let id = self.names.len() as NodeId;
            self.names.push(name.to_string());
            let slot = NodeSlot { id, node: None, usage: Usage::default(), pods: BTreeSet::new(), volume_limits: Vec::new() };
            self.slots.insert(name.to_string(), slot);
        }
        self.slots.get_mut(name).expect("inserted above")
    }

    fn record(&mut self, delta: ClusterDelta) {
        self.log_bytes += delta_bytes(&delta);
        self.log.push_back(delta);
        while self.log.len() > RETAINED_DELTAS || (self.log_bytes > RETAINED_BYTES && self.log.len() > 1) {
            let Some(oldest) = self.log.pop_front() else { break };
            self.log_bytes -= delta_bytes(&oldest);
            self.log_start += 1;
        }
    }

    /// Remembers, on a fork, a bound pod and its node's usage as they were before the fork's first change to them.
    fn remember_pod(&mut self, uid: &str) {
        let Some(origin) = self.origin.as_mut() else { return };
        let Some(bound) = self.pods.get(uid) else { return };
        let Some(slot) = self.slots.get(&bound.node) else { return };
        if slot.node.is_some() {
            origin.pods.entry(bound.id).or_insert_with(|| Some((slot.id, bound.pod.clone())));
            origin.usage.entry(slot.id).or_insert_with(|| slot.usage.to_contract());
        }
    }

    fn remember_usage(&mut self, node_name: &str) {
        let Some(origin) = self.origin.as_mut() else { return };
        if let Some(slot) = self.slots.get(node_name).filter(|slot| slot.node.is_some()) {
            origin.usage.entry(slot.id).or_insert_with(|| slot.usage.to_contract());
        }
    }

    /// On a fork: a change the way back does not cover.
    fn lose_the_way_back(&mut self) {
        if let Some(origin) = self.origin.as_mut() {
            origin.complete = false;
        }
    }

    /// For a fork whose changes are all covered: the deltas that bring a sink with `scope` that follows it back to
    /// the original state at the fork.
    pub fn rewind<'a>(&self, view: impl Into<View<'a>>) -> Option<Rewind> {
        let view = view.into();
        let origin = self.origin.as_ref().filter(|origin| origin.complete)?;
        let mut deltas = Vec::with_capacity(origin.pods.len() + origin.usage.len());
        if view.scope == ViewScope::NodesAndPods {
            for (&id, original) in &origin.pods {
                deltas.push(match original {
                    Some((node, pod)) => ClusterDelta::PodUpsert((id, PodPlace::Bound(*node), view.pod(pod, &self.selected))),
                    None => ClusterDelta::PodRemove(id),
                });
            }
        }
        deltas.extend(origin.usage.iter().map(|(&id, usage)| ClusterDelta::NodeUsageUpdate((id, usage.clone()))));
        Some(Rewind { to: origin.parent, deltas })
    }

    /// Approximate bytes the retained log holds.
    pub fn log_bytes(&self) -> usize {
        self.log_bytes
    }

    /// Adds or updates a node; returns false, recording nothing, when nothing a policy sees changed (a status
    /// heartbeat, say).
    pub fn upsert_node(&mut self, mut node: Node) -> bool {
        let name = node.name.clone();
        let slot = self.slot(&name);
        node.volume_limits = slot.volume_limits.clone();
        if slot.node.as_ref() == Some(&node) {
            return false;
        }
        self.lose_the_way_back();
        let slot = self.slot(&name);
        let first_appearance = slot.node.is_none();
        slot.node = Some(node.clone());
        let (id, usage) = (slot.id, slot.usage.to_contract());
        let pods: Vec<String> = if first_appearance { slot.pods.iter().cloned().collect() } else { Vec::new() };
        self.present.insert(id);
        self.record(ClusterDelta::NodeUpsert((id, node, usage)));
        // Pods that arrived before their node become visible with it.
        for uid in pods {
            let bound = &self.pods[&uid];
            let delta = ClusterDelta::PodUpsert((bound.id, PodPlace::Bound(id), bound.pod.clone()));
            self.record(delta);
        }
        true
    }

    /// Sets how many volumes each CSI driver may attach to the node (its CSINode), before or after the node is
    /// seen; returns whether the node's record changed.
    pub fn set_volume_limits(&mut self, name: &str, limits: Vec<(String, u32)>) -> bool {
        let slot = self.slot(name);
        slot.volume_limits = limits;
        match slot.node.clone() {
            Some(node) => self.upsert_node(node),
            None => false,
        }
    }

    /// Names of the nodes whose CSINode gave limits.
    pub fn nodes_with_volume_limits(&self) -> Vec<String> {
        self.slots.iter().filter(|(_, slot)| !slot.volume_limits.is_empty()).map(|(name, _)| name.clone()).collect()
    }

    pub fn remove_node(&mut self, name: &str) {
        if self.slots.get(name).is_some_and(|slot| slot.node.is_some()) {
            self.lose_the_way_back();
        }
        if let Some(slot) = self.slots.get_mut(name) {
            if slot.node.take().is_some() {
                let id = slot.id;
                self.present.remove(&id);
                self.record(ClusterDelta::NodeRemove(id));
            }
        }
    }

    /// Adds or updates a namespace's labels; records nothing when they did not change.
    pub fn upsert_namespace(&mut self, name: &str, labels: Vec<(String, String)>) -> bool {
        if self.namespaces.get(name) == Some(&labels) {
            return false;
        }
        self.lose_the_way_back();
        self.namespaces.insert(name.to_string(), labels.clone());
        self.record(ClusterDelta::NamespaceUpsert((name.to_string(), labels)));
        true
    }

    pub fn remove_namespace(&mut self, name: &str) {
        if self.namespaces.remove(name).is_some() {
            self.lose_the_way_back();
            self.record(ClusterDelta::NamespaceRemove(name.to_string()));
        }
    }

    /// Keeps a pod that failed on `node` (it no longer counts as bound); an update keeps its id.
    pub fn note_failed(&mut self, mut pod: Pod, node: &str, meta: PodMeta) {
        self.remove_pod(&pod.uid);
        pod.annotations = Vec::new();
        pod.volume_claims = Vec::new();
        let id = match self.failed.get(&pod.uid) {
            Some((known, _)) => known.id,
            None => {
                self.next_pod_id += 1;
                self.next_pod_id - 1
            }
        };
        self.failed.insert(pod.uid.clone(), (FailedPod { id, node: node.to_string(), pod }, meta));
    }

    /// Forgets a failed pod (deleted); returns whether it was known.
    pub fn forget_failed(&mut self, uid: &str) -> bool {
        self.failed.remove(uid).is_some()
    }

    pub fn failed_uids(&self) -> impl Iterator<Item = &str> {
        self.failed.keys().map(String::as_str)
    }

    /// Failed pods still on nodes, in id order.
    pub fn failed_pods(&self) -> Vec<FailedPod> {
        let mut failed: Vec<FailedPod> = self.failed.values().map(|(pod, _)| pod.clone()).collect();
        failed.sort_by_key(|pod| pod.id);
        failed
    }

    /// The failed pod with this id.
    pub fn failed_by_id(&self, id: PodId) -> Option<&FailedPod> {
        self.failed.values().map(|(pod, _)| pod).find(|pod| pod.id == id)
    }

    /// A failed pod and what the host knows of it, by uid.
    pub fn failed_pod(&self, uid: &str) -> Option<(&FailedPod, &PodMeta)> {
        self.failed.get(uid).map(|(pod, meta)| (pod, meta))
    }

    /// Names of the namespaces known.
    pub fn namespace_names(&self) -> impl Iterator<Item = &str> {
        self.namespaces.keys().map(String::as_str)
    }

    /// Adds or updates a pod bound to `node_name` (moving it if it was bound elsewhere); records nothing when it
    /// is already there as it is.
    pub fn upsert_pod(&mut self, pod: Pod, node_name: &str) -> PodChange {
        self.upsert_pod_with(pod, node_name, PodMeta::default())
    }

    /// [`upsert_pod`](Self::upsert_pod) with what the host knows beyond the record; a change of `meta` alone is
    /// kept but sent to no policy.
    pub fn upsert_pod_with(&mut self, mut pod: Pod, node_name: &str, meta: PodMeta) -> PodChange {
        // Pods in views carry no annotations (the contract says so): a tenant's annotations cost no guest memory.
        // Claim names stay (the rescheduler resolves a moved pod's volumes); views drop them (`View::pod`).
        pod.annotations = Vec::new();
        if let Some(bound) = self.pods.get_mut(&pod.uid).filter(|bound| bound.node == node_name && bound.pod == pod) {
            if bound.meta != meta {
                Arc::make_mut(bound).meta = meta;
            }
            return PodChange::Unchanged;
        }
        let uid = pod.uid.clone();
        self.remember_pod(&uid);
        self.remember_usage(node_name);
        let named_now = named_keys(&pod);
        let named_before = self.pods.get(&uid).map(|bound| named_keys(&bound.pod)).unwrap_or_default();
        let moving = self.pods.get(&uid).is_some_and(|bound| bound.node != node_name);
        // The new record's keys count before the old record's go: a key both name never drops to zero in between
        // (which would send every pod carrying it again).
        let newly = if moving || named_before != named_now { self.selected.add(&named_now) } else { Vec::new() };
        if moving {
            self.remove_pod(&uid);
        } else if named_before != named_now {
            self.selected.remove(&named_before);
        }
        let (requests, non_zero_requests) = pod_requests(&pod);
        let change = match self.pods.get(&uid) {
            None => PodChange::Bound,
            Some(bound) => PodChange::Updated { labels_changed: bound.pod.labels != pod.labels, requests_changed: bound.requests != requests },
        };
        let previous = self.pods.get(&uid).map(|bound| (bound.id, bound.requests.clone(), bound.non_zero_requests.clone(), attachments(&bound.pod)));
        let saturated = self.slot(node_name).usage.saturated();
        let id = match previous {
            Some((id, old, old_non_zero, old_attachments)) => {
                let usage = &mut self.slot(node_name).usage;
                usage.requested.subtract(&old);
                usage.non_zero_requested.subtract(&old_non_zero);
                usage.pod_count -= 1;
                usage.detach(&old_attachments);
                id
            }
            None => {
                self.next_pod_id += 1;
                if let Some(origin) = self.origin.as_mut() {
                    origin.pods.entry(self.next_pod_id - 1).or_insert(None);
                }
                self.next_pod_id - 1
            }
        };
        let attached = attachments(&pod);
        let slot = self.slot(node_name);
        slot.usage.requested.add(&requests);
        slot.usage.non_zero_requested.add(&non_zero_requests);
        slot.usage.pod_count += 1;
        slot.usage.attach(&attached);
        slot.pods.insert(uid.clone());
        let delta = ClusterDelta::PodUpsert((id, PodPlace::Bound(slot.id), pod.clone()));
        let bound = BoundPod { id, node: node_name.to_string(), pod, meta, requests, non_zero_requests };
        self.uids.insert(id, uid.clone());
        self.pods.insert(uid, Arc::new(bound));
        if saturated {
            self.sum_usage_again(node_name);
        }
        let slot = self.slot(node_name);
        let (node_id, node_present, usage) = (slot.id, slot.node.is_some(), slot.usage.to_contract());
        if node_present {
            self.record(ClusterDelta::NodeUsageUpdate((node_id, usage)));
            self.record(delta);
        }
        self.send_again_pods_labelled(&newly);
        change
    }

    /// Records the label keys a pod waiting for a scheduler names in its selectors (the pod a filter is about
    /// is such a pod): views with `selected` labels then keep those labels of the bound pods.
    /// `keys` are what [`named_keys`] answers for the pod.
    pub fn select_for_pending(&mut self, uid: &str, keys: Vec<String>) {
        let newly = self.selected.add_pending(uid, keys);
        self.send_again_pods_labelled(&newly);
    }

    /// The pod no longer waits; its keys count no more (views keep the labels they have: no selector reads them).
    pub fn unselect_pending(&mut self, uid: &str) {
        self.selected.remove_pending(uid);
    }

    /// The label keys some pod's selectors name.
    pub fn selected_keys(&self) -> &SelectedKeys {
        &self.selected
    }

    /// Sends again the bound pods that carry one of `keys`, which views with `selected` labels did not keep
    /// until now. A key stops being selected without a delta: a label no selector names changes no answer.
    fn send_again_pods_labelled(&mut self, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let labelled: Vec<(PodId, NodeId, Pod)> = self
            .pods
            .values()
            .filter(|bound| bound.pod.labels.iter().any(|(key, _)| keys.contains(key)))
            .filter_map(|bound| {
                let slot = self.slots.get(&bound.node).filter(|slot| slot.node.is_some())?;
                Some((bound.id, slot.id, bound.pod.clone()))
            })
            .collect();
        for (id, node, pod) in labelled {
            self.record(ClusterDelta::PodUpsert((id, PodPlace::Bound(node), pod)));
        }
    }

    /// The node's usage as the sum of its pods' requests.
    fn sum_usage_again(&mut self, node_name: &str) {
        let Some(slot) = self.slots.get_mut(node_name) else { return };
        let mut usage = Usage::default();
        for bound in slot.pods.iter().filter_map(|uid| self.pods.get(uid)) {
            usage.requested.add(&bound.requests);
            usage.non_zero_requested.add(&bound.non_zero_requests);
            usage.pod_count += 1;
            usage.attach(&attachments(&bound.pod));
        }
        slot.usage = usage;
    }

    /// Removes a bound pod; returns whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        self.remember_pod(uid);
        let Some(bound) = self.pods.remove(uid) else { return false };
        self.selected.remove(&named_keys(&bound.pod));
        self.uids.remove(&bound.id);
        self.pods.shrink_when_sparse();
        self.uids.shrink_when_sparse();
        let slot = self.slot(&bound.node);
        let saturated = slot.usage.saturated();
        slot.usage.requested.subtract(&bound.requests);
        slot.usage.non_zero_requested.subtract(&bound.non_zero_requests);
        slot.usage.pod_count -= 1;
        slot.usage.detach(&attachments(&bound.pod));
        slot.pods.remove(uid);
        if saturated {
            self.sum_usage_again(&bound.node);
        }
        let slot = self.slot(&bound.node);
        let (node_id, node_present, usage) = (slot.id, slot.node.is_some(), slot.usage.to_contract());
        if node_present {
            self.record(ClusterDelta::NodeUsageUpdate((node_id, usage)));
            self.record(ClusterDelta::PodRemove(bound.id));
        }
        true
    }

    /// Brings an instance up to [`head`](Self::head): the deltas it missed, or a full snapshot when it follows
    /// another state's log or fell behind this one's retained part.
    pub fn sync<'a, S: DeltaSink>(&self, instance: &mut S, view: impl Into<View<'a>>) -> Result<(), S::Error> {
        let view = view.into();
        let head = self.head();
        let mut point = instance.synced_to();
        // Back from a fork of this state: undo the fork's changes, then follow this log from the fork's point.
        if point.is_some_and(|point| point.epoch != self.epoch) {
            if let Some(rewind) = instance.take_rewind().filter(|rewind| rewind.to.epoch == self.epoch) {
                // Made by `rewind` for this instance's view, so already trimmed to it.
                send_in_chunks(instance, rewind.deltas.into_iter())?;
                instance.set_synced_to(rewind.to);
                point = Some(rewind.to);
            }
        }
        // At the point this fork was taken from: the fork's log from its start is all it lacks.
        if self.origin.as_ref().is_some_and(|origin| point == Some(origin.parent)) {
            point = Some(SyncPoint { epoch: self.epoch, position: 0 });
        }
        match point {
            Some(SyncPoint { epoch, position }) if epoch == self.epoch && position == head => {}
            Some(SyncPoint { epoch, position }) if epoch == self.epoch && position >= self.log_start && position <= head => {
                let missed = self.log.range((position - self.log_start) as usize..);
                let relevant = missed.filter(|delta| view.scope == ViewScope::NodesAndPods || !is_pod_delta(delta));
                send_in_chunks(instance, relevant.map(|delta| view.delta(delta, &self.selected)))?;
            }
            _ => send_in_chunks(instance, self.snapshot(view))?,
        }
        instance.set_synced_to(SyncPoint { epoch: self.epoch, position: head });
        instance.keep_rewind(self.rewind(view));
        Ok(())
    }

    /// A reset followed by every node (and, for views with pods, every bound pod), with the view's facts.
    fn snapshot<'a>(&'a self, view: View<'a>) -> impl Iterator<Item = ClusterDelta> + 'a {
        let scope = view.scope;
        let present = || self.slots.values().filter_map(|slot| slot.node.as_ref().map(|node| (slot, node)));
        let nodes = present().map(move |(slot, node)| ClusterDelta::NodeUpsert((slot.id, view.node(node), slot.usage.to_contract())));
        let pods = present()
            .filter(move |_| scope == ViewScope::NodesAndPods)
            .flat_map(move |(slot, _)| slot.pods.iter().map(move |uid| (slot.id, &self.pods[uid])))
            .map(move |(node_id, bound)| ClusterDelta::PodUpsert((bound.id, PodPlace::Bound(node_id), view.pod(&bound.pod, &self.selected))));
        let namespaces = self
            .namespaces
            .iter()
            .filter(move |_| scope == ViewScope::NodesAndPods)
            .map(|(name, labels)| ClusterDelta::NamespaceUpsert((name.clone(), labels.clone())));
        std::iter::once(ClusterDelta::Reset).chain(nodes).chain(namespaces).chain(pods)
    }
}

/// Deltas only views with pods receive.
fn is_pod_delta(delta: &ClusterDelta) -> bool {
    matches!(delta, ClusterDelta::PodUpsert(_) | ClusterDelta::PodRemove(_) | ClusterDelta::NamespaceUpsert(_) | ClusterDelta::NamespaceRemove(_))
}

/// Keeps its own copy of the cluster, fed from a state's delta log: a policy instance, or a policy compiled
/// natively.
pub trait DeltaSink {
    type Error;
    /// The log and position it has applied up to; None before its first sync.
    fn synced_to(&self) -> Option<SyncPoint>;
    fn set_synced_to(&mut self, point: SyncPoint);
    fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), Self::Error>;
    /// Keeps the way back from the fork it now follows (None: it follows no fork, or one without a way back).
    /// Sinks that keep none get a snapshot when they return from a fork.
    fn keep_rewind(&mut self, _rewind: Option<Rewind>) {}
    fn take_rewind(&mut self) -> Option<Rewind> {
        None
    }
}

fn send_in_chunks<S: DeltaSink>(instance: &mut S, deltas: impl Iterator<Item = ClusterDelta>) -> Result<(), S::Error> {
    let mut chunk = Vec::with_capacity(SYNC_CHUNK);
    let mut bytes = 0;
    for delta in deltas {
        bytes += delta_bytes(&delta);
        chunk.push(delta);
        if chunk.len() == SYNC_CHUNK || bytes >= SYNC_CHUNK_BYTES {
            instance.apply(&chunk)?;
            chunk.clear();
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        instance.apply(&chunk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn node(cpu: &str) -> Node {
        let source = serde_json::json!({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": cpu, "pods": "110"}}});
        convert::node(&serde_json::from_value(source).unwrap()).unwrap()
    }

    fn pod(label: &str) -> Pod {
        let source = serde_json::json!({"metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"l": label}}, "spec": {"containers": []}});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn identical_updates_record_nothing() {
        let mut cluster = ClusterState::new();
        assert!(cluster.upsert_node(node("4")));
        assert_eq!(cluster.upsert_pod(pod("a"), "n"), PodChange::Bound);
        let head = cluster.head();
        assert!(!cluster.upsert_node(node("4")), "a heartbeat changes nothing policies see");
        assert_eq!(cluster.upsert_pod(pod("a"), "n"), PodChange::Unchanged);
        assert_eq!(cluster.head(), head);
        assert!(cluster.upsert_node(node("8")));
        assert_eq!(cluster.upsert_pod(pod("b"), "n"), PodChange::Updated { labels_changed: true, requests_changed: false });
        assert!(cluster.head() > head);
    }

    #[test]
    fn a_volume_two_pods_share_is_attached_once_and_csi_limits_join_the_node_whenever_they_come() {
        let mut cluster = ClusterState::new();
        assert!(!cluster.set_volume_limits("n", vec![("disk.csi".into(), 2)]), "no node yet: kept for it");
        cluster.upsert_node(node("4"));
        let limits = |cluster: &ClusterState| cluster.node(cluster.node_id("n").unwrap()).unwrap().0.volume_limits.clone();
        assert_eq!(limits(&cluster), [("disk.csi".to_string(), 2)]);
        assert!(!cluster.upsert_node(node("4")), "the node's own updates keep its CSINode's limits");
        assert_eq!(limits(&cluster), [("disk.csi".to_string(), 2)]);
        let using = |uid: &str, handles: &[&str]| {
            let mut pod = pod("a");
            pod.uid = uid.into();
            pod.volume_claims = handles
                .iter()
                .map(|handle| crate::contract::types::VolumeClaim {
                    name: handle.to_string(),
                    requirement: crate::contract::types::ClaimRequirement::Anywhere,
                    attachment: Some(AttachedVolume { driver: "disk.csi".into(), handle: handle.to_string() }),
                })
                .collect();
            pod
        };
        let attached = |cluster: &ClusterState| -> Vec<String> {
            cluster.node(cluster.node_id("n").unwrap()).unwrap().1.attached_volumes.into_iter().map(|volume| volume.handle).collect()
        };
        cluster.upsert_pod(using("u1", &["shared", "own"]), "n");
        cluster.upsert_pod(using("u2", &["shared"]), "n");
        assert_eq!(attached(&cluster), ["own", "shared"]);
        cluster.upsert_pod(using("u1", &["shared"]), "n");
        assert_eq!(attached(&cluster), ["shared"], "an update lets go of what the pod no longer uses");
        cluster.remove_pod("u1");
        assert_eq!(attached(&cluster), ["shared"], "still used by u2");
        cluster.remove_pod("u2");
        assert!(attached(&cluster).is_empty());
        assert!(cluster.set_volume_limits("n", Vec::new()));
        assert!(limits(&cluster).is_empty());
    }

    /// A sink that keeps the deltas it received, in order.
    #[derive(Default)]
    struct Transcript {
        synced_to: Option<SyncPoint>,
        deltas: Vec<ClusterDelta>,
    }

    impl DeltaSink for Transcript {
        type Error = ();
        fn synced_to(&self) -> Option<SyncPoint> {
            self.synced_to
        }
        fn set_synced_to(&mut self, point: SyncPoint) {
            self.synced_to = Some(point);
        }
        fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), ()> {
            self.deltas.extend_from_slice(deltas);
            Ok(())
        }
    }

    #[test]
    fn namespaces_reach_views_with_pods_only_and_view_pods_carry_no_annotations_or_claims() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(node("4"));
        let mut annotated = pod("a");
        annotated.annotations = vec![("team".into(), "payments".into())];
        let claim =
            crate::contract::types::VolumeClaim { name: "data".into(), requirement: crate::contract::types::ClaimRequirement::Anywhere, attachment: None };
        annotated.volume_claims = vec![claim];
        cluster.upsert_pod(annotated, "n");
        assert_eq!(cluster.pod("u").unwrap().0.volume_claims.len(), 1, "the host keeps a bound pod's claims");
        assert!(cluster.upsert_namespace("d", vec![("team".into(), "a".into())]));
        assert!(!cluster.upsert_namespace("d", vec![("team".into(), "a".into())]), "unchanged labels record nothing");
        let (mut nodes_only, mut with_pods) = (Transcript::default(), Transcript::default());
        cluster.sync(&mut nodes_only, ViewScope::Nodes).unwrap();
        cluster.sync(&mut with_pods, ViewScope::NodesAndPods).unwrap();
        let is_namespace = |delta: &ClusterDelta| matches!(delta, ClusterDelta::NamespaceUpsert(_));
        assert!(!nodes_only.deltas.iter().any(is_namespace));
        assert!(with_pods.deltas.iter().any(is_namespace));
        let sent_pod = with_pods.deltas.iter().find_map(|delta| match delta {
            ClusterDelta::PodUpsert((_, _, pod)) => Some(pod),
            _ => None,
        });
        assert!(sent_pod.unwrap().annotations.is_empty() && sent_pod.unwrap().volume_claims.is_empty());
        cluster.remove_namespace("d");
        cluster.sync(&mut with_pods, ViewScope::NodesAndPods).unwrap();
        assert!(matches!(with_pods.deltas.last(), Some(ClusterDelta::NamespaceRemove(name)) if name == "d"));
    }

    #[test]
    fn a_view_receives_only_the_facts_its_policy_declares_in_snapshots_and_in_the_log() {
        use crate::contract::types::{LabelScope, NodeFacts, NodeImage, PodFacts};
        let mut cluster = ClusterState::new();
        let mut imaged = node("4");
        imaged.images = vec![NodeImage { names: vec!["app:1".into()], size_bytes: 300 << 20 }];
        imaged.labels = vec![("topology.kubernetes.io/zone".into(), "a".into())];
        cluster.upsert_node(imaged);
        cluster.upsert_pod(pod("a"), "n");
        let none = PodFacts { labels: LabelScope::None, containers: false, images: false, placement: false, pod_affinity: false, host_ports: false };
        let labels_and_images = View {
            scope: ViewScope::NodesAndPods,
            pod_facts: PodFacts { labels: LabelScope::All, ..none },
            node_facts: NodeFacts { labels: true, taints: true, conditions: true, images: true },
            settings_keys: &[],
        };
        let nothing = View {
            scope: ViewScope::NodesAndPods,
            pod_facts: none,
            node_facts: NodeFacts { labels: false, taints: false, conditions: false, images: false },
            settings_keys: &[],
        };
        let sent = |transcript: &Transcript| {
            let nodes: Vec<&Node> =
                transcript.deltas.iter().filter_map(|delta| if let ClusterDelta::NodeUpsert((_, node, _)) = delta { Some(node) } else { None }).collect();
            let pods: Vec<&Pod> =
                transcript.deltas.iter().filter_map(|delta| if let ClusterDelta::PodUpsert((_, _, pod)) = delta { Some(pod) } else { None }).collect();
            (nodes.iter().map(|node| node.images.len() + node.labels.len()).collect::<Vec<_>>(), pods.iter().map(|pod| pod.labels.len()).collect::<Vec<_>>())
        };
        let (mut reader, mut blind) = (Transcript::default(), Transcript::default());
        cluster.sync(&mut reader, labels_and_images).unwrap();
        cluster.sync(&mut blind, nothing).unwrap();
        assert_eq!(sent(&reader), (vec![2], vec![1]), "a snapshot with the declared facts: the image and the label");
        assert_eq!(sent(&blind), (vec![0], vec![0]), "a snapshot without them");
        // Changes from the log are trimmed the same way.
        cluster.upsert_pod(pod("b"), "n");
        let (reader_before, blind_before) = (reader.deltas.len(), blind.deltas.len());
        cluster.sync(&mut reader, labels_and_images).unwrap();
        cluster.sync(&mut blind, nothing).unwrap();
        assert!(reader.deltas.len() > reader_before && blind.deltas.len() > blind_before);
        let resets = |transcript: &Transcript| transcript.deltas.iter().filter(|delta| matches!(delta, ClusterDelta::Reset)).count();
        assert_eq!((resets(&reader), resets(&blind)), (1, 1), "the change came from the log, not a second snapshot");
        assert_eq!(sent(&reader).1, vec![1, 1]);
        assert_eq!(sent(&blind).1, vec![0, 0]);
    }

    /// The label keys of the last copy of pod `uid` the sink received: what its guest holds.
    fn label_keys_sent(transcript: &Transcript, uid: &str) -> Option<Vec<String>> {
        transcript.deltas.iter().rev().find_map(|delta| match delta {
            ClusterDelta::PodUpsert((_, _, pod)) if pod.uid == uid => Some(pod.labels.iter().map(|(key, _)| key.clone()).collect()),
            _ => None,
        })
    }

    /// A pod with these labels, and a topology spread constraint selecting on `selects` when given.
    fn labelled(uid: &str, labels: &[(&str, &str)], selects: Option<&str>) -> Pod {
        let labels: serde_json::Map<String, serde_json::Value> = labels.iter().map(|(key, value)| (key.to_string(), serde_json::json!(value))).collect();
        let constraints: Vec<serde_json::Value> = selects
            .map(|key| serde_json::json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchExpressions": [{"key": key, "operator": "Exists"}]}}))
            .into_iter()
            .collect();
        let source = serde_json::json!({"metadata": {"name": uid, "namespace": "d", "uid": uid, "labels": labels}, "spec": {"containers": [], "topologySpreadConstraints": constraints}});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn a_view_of_selected_labels_gets_the_keys_selectors_name_and_the_pods_again_when_a_key_is_newly_named() {
        use crate::contract::types::{LabelScope, NodeFacts, PodFacts};
        let facts = PodFacts { labels: LabelScope::Selected, containers: false, images: false, placement: false, pod_affinity: false, host_ports: false };
        let settings_keys = vec!["team".to_string()];
        let view = View {
            scope: ViewScope::NodesAndPods,
            pod_facts: facts,
            node_facts: NodeFacts { labels: false, taints: false, conditions: false, images: false },
            settings_keys: &settings_keys,
        };
        let mut cluster = ClusterState::new();
        cluster.upsert_node(node("4"));
        let bulky = [("app", "web"), ("team", "a"), ("tenant.example.com/blob-1", "x"), ("zone-hint", "east")];
        cluster.upsert_pod(labelled("bulky", &bulky, None), "n");
        cluster.upsert_pod(labelled("spread", &[("app", "web")], Some("app")), "n");
        let mut guest = Transcript::default();
        cluster.sync(&mut guest, view).unwrap();
        assert_eq!(label_keys_sent(&guest, "bulky").unwrap(), ["app", "team"], "what a bound pod's selector or the settings name, nothing else");

        // A waiting pod names a key no selector named: the bound pods carrying it are sent again, with it.
        let seen = guest.deltas.len();
        cluster.select_for_pending("waiting", named_keys(&labelled("waiting", &[], Some("zone-hint"))));
        cluster.sync(&mut guest, view).unwrap();
        assert_eq!(label_keys_sent(&guest, "bulky").unwrap(), ["app", "team", "zone-hint"]);
        assert!(guest.deltas[seen..].iter().all(|delta| !matches!(delta, ClusterDelta::Reset)), "from the log, not a snapshot");
        let sent_again: Vec<&str> = guest.deltas[seen..]
            .iter()
            .filter_map(|delta| if let ClusterDelta::PodUpsert((_, _, pod)) = delta { Some(pod.uid.as_str()) } else { None })
            .collect();
        assert_eq!(sent_again, ["bulky"], "only the pods that carry the key");

        // The pod is placed and the selecting pod goes: the key is no longer selected, a fresh view lacks it.
        cluster.unselect_pending("waiting");
        assert!(cluster.selected_keys().contains("app") && !cluster.selected_keys().contains("zone-hint"));
        cluster.remove_pod("spread");
        assert!(cluster.selected_keys().is_empty());
        let mut fresh = Transcript::default();
        cluster.sync(&mut fresh, view).unwrap();
        assert_eq!(label_keys_sent(&fresh, "bulky").unwrap(), ["team"]);
    }

    #[test]
    fn an_instance_back_from_a_fork_that_removed_the_only_selecting_pod_keeps_what_the_live_state_selects() {
        use crate::contract::types::{LabelScope, NodeFacts, PodFacts};
        let facts = PodFacts { labels: LabelScope::Selected, containers: false, images: false, placement: false, pod_affinity: false, host_ports: false };
        let view = View {
            scope: ViewScope::NodesAndPods,
            pod_facts: facts,
            node_facts: NodeFacts { labels: false, taints: false, conditions: false, images: false },
            settings_keys: &[],
        };
        let mut live = ClusterState::new();
        live.upsert_node(node("4"));
        live.upsert_pod(labelled("victim", &[("app", "web")], Some("app")), "n");
        let mut guest = Transcript::default();
        live.sync(&mut guest, view).unwrap();
        // A what-if run removes the only pod that selects `app` (a preemption victim), the guest follows it...
        let mut whatif = live.fork();
        whatif.remove_pod("victim");
        whatif.upsert_pod(labelled("beneficiary", &[], None), "n");
        assert!(whatif.selected_keys().contains("app"), "a fork's keys only grow");
        whatif.sync(&mut guest, view).unwrap();
        // ...and comes back by its way back: the victim, still bound in the live state, still has its label.
        live.sync(&mut guest, view).unwrap();
        assert_eq!(label_keys_sent(&guest, "victim").unwrap(), ["app"]);
    }

    /// A sink that keeps what a guest with pods in its view would: pods by node, usage, how many snapshots it
    /// took, and the way back from a fork.
    #[derive(Default)]
    struct Mirror {
        point: Option<SyncPoint>,
        pods: BTreeMap<PodId, NodeId>,
        cpu: BTreeMap<NodeId, u64>,
        resets: usize,
        rewind: Option<Rewind>,
    }

    impl DeltaSink for Mirror {
        type Error = ();
        fn synced_to(&self) -> Option<SyncPoint> {
            self.point
        }
        fn set_synced_to(&mut self, point: SyncPoint) {
            self.point = Some(point);
        }
        fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), ()> {
            for delta in deltas {
                match delta {
                    ClusterDelta::Reset => {
                        self.resets += 1;
                        self.pods.clear();
                        self.cpu.clear();
                    }
                    ClusterDelta::NodeUpsert((id, _, usage)) | ClusterDelta::NodeUsageUpdate((id, usage)) => {
                        self.cpu.insert(*id, usage.requested.cpu_millis);
                    }
                    ClusterDelta::PodUpsert((id, PodPlace::Bound(node), _)) => {
                        self.pods.insert(*id, *node);
                    }
                    ClusterDelta::PodRemove(id) => {
                        self.pods.remove(id);
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        fn keep_rewind(&mut self, rewind: Option<Rewind>) {
            self.rewind = rewind;
        }
        fn take_rewind(&mut self) -> Option<Rewind> {
            self.rewind.take()
        }
    }

    fn mirrored(state: &ClusterState) -> (BTreeMap<PodId, NodeId>, BTreeMap<NodeId, u64>) {
        let mut pods = BTreeMap::new();
        for (pod, node) in state.bound_pods() {
            let (id, node) = (state.pods[&pod.uid].id, state.node_id(node).unwrap());
            pods.insert(id, node);
        }
        let cpu = state.node_ids().into_iter().map(|id| (id, state.node(id).unwrap().1.requested.cpu_millis)).collect();
        (pods, cpu)
    }

    fn named(name: &str, cpu: &str) -> Node {
        let source = serde_json::json!({"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "pods": "110"}}});
        convert::node(&serde_json::from_value(source).unwrap()).unwrap()
    }

    fn requesting(uid: &str, cpu: &str) -> Pod {
        let source = serde_json::json!({"metadata": {"name": uid, "namespace": "d", "uid": uid}, "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}}}]}});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn an_instance_follows_a_fork_with_its_deltas_and_comes_back_by_undoing_them() {
        let mut live = ClusterState::new();
        live.upsert_node(named("n1", "4"));
        live.upsert_node(named("n2", "4"));
        for (uid, node) in [("a", "n1"), ("b", "n1"), ("c", "n2")] {
            live.upsert_pod(requesting(uid, "500m"), node);
        }
        let mut mirror = Mirror::default();
        live.sync(&mut mirror, ViewScope::NodesAndPods).unwrap();
        assert_eq!(mirror.resets, 1);

        // The plan's moves: a goes to n2, a pending pod takes room on n1.
        let mut fork = live.fork();
        fork.remove_pod("a");
        fork.upsert_pod(requesting("a", "500m"), "n2");
        fork.upsert_pod(requesting("pending", "1"), "n1");
        fork.sync(&mut mirror, ViewScope::NodesAndPods).unwrap();
        assert_eq!(mirror.resets, 1, "the fork's own deltas, no snapshot");
        assert_eq!((mirror.pods.clone(), mirror.cpu.clone()), mirrored(&fork));

        // The live state went on meanwhile; the instance comes back to it.
        live.upsert_pod(requesting("d", "250m"), "n2");
        live.remove_pod("b");
        fork.upsert_pod(requesting("pending-2", "1"), "n2");
        live.sync(&mut mirror, ViewScope::NodesAndPods).unwrap();
        assert_eq!(mirror.resets, 1, "undo and the live deltas, no snapshot");
        assert_eq!((mirror.pods.clone(), mirror.cpu.clone()), mirrored(&live));

        // A fork that changes what the way back does not cover: snapshots, as before.
        let mut other = live.fork();
        other.upsert_node(named("n3", "8"));
        other.sync(&mut mirror, ViewScope::NodesAndPods).unwrap();
        live.sync(&mut mirror, ViewScope::NodesAndPods).unwrap();
        assert_eq!(mirror.resets, 2, "the fork from the live head followed by deltas, then a snapshot back");
        assert_eq!((mirror.pods.clone(), mirror.cpu.clone()), mirrored(&live));
    }

    #[test]
    fn a_failed_pod_frees_its_node_keeps_its_id_and_is_in_no_view() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(node("4"));
        cluster.upsert_pod(pod("a"), "n");
        let id = cluster.node_id("n").unwrap();
        assert_eq!(cluster.node(id).unwrap().1.pod_count, 1);
        cluster.note_failed(pod("a"), "n", PodMeta::default());
        assert_eq!(cluster.node(id).unwrap().1.pod_count, 0, "a failed pod holds nothing");
        let failed = cluster.failed_pods();
        assert_eq!(failed.len(), 1);
        cluster.note_failed(pod("a"), "n", PodMeta::default());
        assert_eq!(cluster.failed_pods()[0].id, failed[0].id, "an update keeps the id");
        assert!(cluster.failed_by_id(failed[0].id).is_some() && cluster.pod_by_id(failed[0].id).is_none());
        assert!(cluster.fork().failed_by_id(failed[0].id).is_some(), "what-if copies know it too");
        assert!(cluster.forget_failed("u"));
        assert!(cluster.failed_pods().is_empty());
    }

    #[test]
    fn the_log_is_bounded_in_bytes_and_a_sink_behind_it_gets_a_snapshot() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(node("4"));
        let mut sink = Recorder::default();
        cluster.sync(&mut sink, ViewScope::Nodes).unwrap();
        // Pods with label sets near the API server's limits: each delta weighs about 250 KB.
        let labels: serde_json::Map<String, serde_json::Value> =
            (0..1000).map(|index| (format!("tenant.example.com/key-{index:04}-{}", "k".repeat(40)), serde_json::json!("v".repeat(63)))).collect();
        for index in 0..400 {
            let uid = format!("big-{index}");
            let source = serde_json::json!({"metadata": {"name": uid, "namespace": "d", "uid": uid, "labels": labels}, "spec": {"containers": []}});
            cluster.upsert_pod(convert::pod(&serde_json::from_value(source).unwrap()).unwrap(), "n");
            cluster.remove_pod(&uid);
        }
        assert!(cluster.log_bytes() <= RETAINED_BYTES, "{} bytes retained", cluster.log_bytes());
        assert!(cluster.log.len() < 800, "old deltas were dropped by bytes, not only by count");
        cluster.sync(&mut sink, ViewScope::Nodes).unwrap();
        assert_eq!(sink.resets, 2, "the sink fell behind the retained log: a full snapshot brought it back");
    }

    #[test]
    fn a_saturated_total_is_summed_again_when_pods_leave() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(node("4"));
        let with_memory = |uid: &str, memory: &str| {
            let source = serde_json::json!({"metadata": {"name": uid, "namespace": "d", "uid": uid}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": memory}}}]}});
            convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
        };
        cluster.upsert_pod(with_memory("real", "1Gi"), "n");
        for index in 0..4 {
            cluster.upsert_pod(with_memory(&format!("huge-{index}"), "4Ei"), "n");
        }
        let memory = |cluster: &ClusterState| cluster.slots["n"].usage.requested.memory_bytes;
        assert_eq!(memory(&cluster), u64::MAX, "saturated, not wrapped");
        for index in 0..4 {
            cluster.remove_pod(&format!("huge-{index}"));
        }
        assert_eq!(memory(&cluster), 1 << 30, "the pod still running keeps its gigabyte");
    }

    /// Records every delta it is sent, like a guest's own view.
    #[derive(Default)]
    struct Recorder {
        point: Option<SyncPoint>,
        nodes: std::collections::BTreeMap<NodeId, u64>,
        resets: usize,
    }

    impl DeltaSink for Recorder {
        type Error = std::convert::Infallible;
        fn synced_to(&self) -> Option<SyncPoint> {
            self.point
        }
        fn set_synced_to(&mut self, point: SyncPoint) {
            self.point = Some(point);
        }
        fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), Self::Error> {
            for delta in deltas {
                match delta {
                    ClusterDelta::Reset => {
                        self.resets += 1;
                        self.nodes.clear();
                    }
                    ClusterDelta::NodeUpsert((id, _, usage)) | ClusterDelta::NodeUsageUpdate((id, usage)) => {
                        self.nodes.insert(*id, usage.requested.cpu_millis);
                    }
                    ClusterDelta::NodeRemove(id) => {
                        self.nodes.remove(id);
                    }
                    _ => {}
                }
            }
            Ok(())
        }
    }

    #[test]
    fn a_sink_used_on_a_fork_and_the_live_state_alternately_always_sees_the_state_it_is_used_on() {
        let mut live = ClusterState::new();
        live.upsert_node(node("4"));
        let busy = |name: &str, cpu: &str| {
            let source = serde_json::json!({"metadata": {"name": name, "namespace": "d", "uid": name}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
            convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
        };
        live.upsert_pod(busy("a", "1"), "n");
        live.upsert_pod(busy("b", "2"), "n");
        let mut sink = Recorder::default();
        live.sync(&mut sink, ViewScope::Nodes).unwrap();
        assert_eq!(sink.nodes.values().copied().collect::<Vec<_>>(), [3000]);

        let mut what_if = live.fork();
        assert!(what_if.remove_pod("b"));
        assert_ne!(what_if.epoch(), live.epoch());
        for round in 0..3 {
            what_if.sync(&mut sink, ViewScope::Nodes).unwrap();
            assert_eq!(sink.nodes.values().copied().collect::<Vec<_>>(), [1000], "round {round}: the fork without b");
            live.upsert_pod(busy(&format!("more-{round}"), "1"), "n");
            live.sync(&mut sink, ViewScope::Nodes).unwrap();
            assert_eq!(sink.nodes.values().copied().collect::<Vec<_>>(), [4000 + round * 1000], "round {round}: the live state");
        }
        assert_eq!(live.pod_by_id(1).map(|(pod, node)| (pod.name.as_str(), node)), Some(("b", "n")), "the fork left the live state alone");
        assert!(what_if.pod_by_id(1).is_none());
    }
}
